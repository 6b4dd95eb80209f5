// CIFAR-style ResNets (He et al. 2016, "Deep Residual Learning for Image Recognition", section 4.2):
// ResNet-20 and ResNet-56, and any depth 6n + 2.
//
// A 3x3 convolution with 16 output channels (stride 1) + batch-norm + ReLU, then three stages of
// n basic blocks (two 3x3 conv + batch-norm) with 16, 32 and 64 channels; the first block of stages
// 2 and 3 has stride 2, halving the resolution. Global average pooling and one linear layer `fc`.
// n = 3 gives ResNet-20, n = 9 ResNet-56.
//
// Shortcuts: the identity where the shapes match, and a projection (1x1 convolution with the
// block's stride + batch-norm: the paper's "option B") where they change, i.e. in the first block
// of stages 2 and 3. The paper's CIFAR results use option A (zero-padded identity, no parameters);
// option B adds 2,752 parameters: ResNet-20 has 272,474 (option A: 269,722) and ResNet-56 855,770
// (option A: 853,018) for 3 input channels and 10 classes.
//
// Module names follow torchvision (`conv1`, `bn1`, `layer1.0.conv1`, `layer2.0.downsample.0`, `fc`),
// the blocks being models::BasicBlock (models/blocks.h). Initialisation: Kaiming-normal
// convolutions (fan_out, ReLU), batch-norm weight 1 and bias 0, fc PyTorch's Linear default.
//
// Registered in the model registry as cifar_resnet20 and cifar_resnet56; the ModelSpec gives
// in_channels and num_classes (widths, blocks and dropout are not used). Any input size works
// (global pooling); the design point is 32x32.
#pragma once

#include <cstdint>
#include <string>

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>

#include "models/batch_norm.h"

namespace stoker::models {

namespace onnx { class OnnxExport; }  // models/onnx/export.h

class CifarResNetImpl : public torch::nn::Module {
 public:
  // `depth` = 6n + 2 (20, 32, 44, 56, 110, ...): n blocks per stage.
  explicit CifarResNetImpl(int64_t depth, int64_t num_classes = 10, int64_t in_channels = 3);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::nn::Sequential make_stage(int64_t planes, int64_t blocks, int64_t stride);

  int64_t inplanes_ = 16;
  torch::nn::Conv2d conv1{nullptr};
  BatchNorm2d bn1{nullptr};
  torch::nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr};
  torch::nn::AdaptiveAvgPool2d avgpool{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(CifarResNet);

// The ONNX exporter of the CIFAR ResNets (models/onnx/export.h): their forward.
std::string cifar_resnet_to_onnx(onnx::OnnxExport& e, const CifarResNetImpl& net, const std::string& x);

inline CifarResNet cifar_resnet20(int64_t num_classes = 10, int64_t in_channels = 3) {
  return CifarResNet(20, num_classes, in_channels);
}
inline CifarResNet cifar_resnet56(int64_t num_classes = 10, int64_t in_channels = 3) {
  return CifarResNet(56, num_classes, in_channels);
}

}  // namespace stoker::models
