// torchvision-compatible ResNet-18/34/50/101, and torchvision's initialisation of ResNets.
//
// The architecture is torchvision.models.resnet's, module for module: a 7x7 stride-2 stem `conv1`,
// `bn1`, ReLU, a 3x3 stride-2 max-pool, `layer1`..`layer4` of BasicBlock (18/34) or Bottleneck
// (50/101, the stride on the 3x3 conv as in torchvision's "ResNet v1.5"; both in models/blocks.h),
// adaptive average pooling and `fc`. Parameter and buffer names equal torchvision's state_dict()
// keys exactly (`layer1.0.downsample.0.weight`, `layer2.1.bn2.running_mean`,
// `bn1.num_batches_tracked`, ...), so weights move both ways with save_state_dict /
// load_state_dict (models/weights/state_dict.h).
//
// Registered in the model registry as resnet18, resnet34, resnet50 and resnet101; the ModelSpec
// gives in_channels (the stem's input) and num_classes (fc's output). Their one key of their own is
// drop_path_rate (ResNetOptions), shared with the CIFAR ResNets.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>

#include "models/batch_norm.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/options.h"
#include "models/layer_groups.h"
#include "models/registry.h"

namespace stoker::models {

namespace onnx { class OnnxExport; }  // models/onnx/export.h

// The own keys of the torchvision-style and CIFAR ResNets: model.drop_path_rate, stochastic depth
// rising linearly over the blocks from 0 to the rate (models/blocks.h apply_drop_path; timm
// --drop-path, RSB A1/A2/A3: 0.05). 0 = off.
struct ResNetOptions : TypeOptionsOf<ResNetOptions> {
  double drop_path_rate = 0.0;
  void visit(OptionsVisitor& v) override;
};

// torchvision's initialisation (zero_init_residual=False): Kaiming-normal (fan-out, ReLU) for every
// convolution, weight 1 and bias 0 for every batch norm; linear layers keep their default.
void init_resnet_weights(torch::nn::Module& model);

// The layers of the torchvision-layout and CIFAR ResNets for optimizer.layer_decay: timm's
// ResNet.group_matcher(coarse=False): the stem (conv1, bn1), then each block layer<i>.<j>, then fc.
std::vector<LayerGroup> resnet_layer_groups();

// The model type of a ResNet that `build` makes from the data's classes and channels: stochastic depth
// its one key (ResNetOptions), its head `fc`, its layers resnet_layer_groups(). torchvision's ResNets
// (resnet.cpp) and the CIFAR ones (cifar_resnet.cpp) register theirs with it.
ModelType resnet_type(std::function<torch::nn::AnyModule(int64_t num_classes, int64_t in_channels)> build);
template <typename Module>
ModelType resnet_type(Module (*build)(int64_t num_classes, int64_t in_channels)) {
  return resnet_type([build](int64_t num_classes, int64_t in_channels) {
    return torch::nn::AnyModule(build(num_classes, in_channels));
  });
}

enum class ResNetBlock { basic, bottleneck };

class ResNetImpl : public torch::nn::Module {
 public:
  // `layers`: blocks per stage, e.g. {2, 2, 2, 2} for ResNet-18. Initialisation as torchvision:
  // Kaiming-normal (fan_out, relu) convs, BN weight 1 / bias 0, fc PyTorch's Linear default.
  ResNetImpl(ResNetBlock block, std::vector<int64_t> layers, int64_t num_classes = 1000,
             int64_t in_channels = 3);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::nn::Sequential make_layer(ResNetBlock block, int64_t planes, int64_t blocks,
                                   int64_t stride);

  int64_t inplanes_ = 64;
  torch::nn::Conv2d conv1{nullptr};
  BatchNorm2d bn1{nullptr};
  torch::nn::MaxPool2d maxpool{nullptr};
  torch::nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr}, layer4{nullptr};
  torch::nn::AdaptiveAvgPool2d avgpool{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(ResNet);

ResNet resnet18(int64_t num_classes = 1000, int64_t in_channels = 3);
ResNet resnet34(int64_t num_classes = 1000, int64_t in_channels = 3);
ResNet resnet50(int64_t num_classes = 1000, int64_t in_channels = 3);
ResNet resnet101(int64_t num_classes = 1000, int64_t in_channels = 3);

// The ONNX exporter of the torchvision-style ResNets (models/onnx/export.h): their forward.
std::string resnet_to_onnx(onnx::OnnxExport& e, const ResNetImpl& net, const std::string& x);

}  // namespace stoker::models
