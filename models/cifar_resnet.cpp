// CIFAR-style ResNets (models/cifar_resnet.h): the network and its initialisation.
#include "models/cifar_resnet.h"

#include <torch/torch.h>

#include "common/error.h"
#include "models/blocks.h"
#include "models/onnx/export.h"
#include "models/onnx/nn.h"
#include "models/registry.h"
#include "models/resnet.h"  // init_resnet_weights

namespace stoker::models {
namespace nn = torch::nn;

CifarResNetImpl::CifarResNetImpl(int64_t depth, int64_t num_classes, int64_t in_channels) {
  STOKER_CHECK(depth >= 8 && (depth - 2) % 6 == 0,
               "a CIFAR ResNet has depth 6n + 2 (20, 32, 44, 56, 110, ...), got {}", depth);
  STOKER_CHECK(num_classes > 0 && in_channels > 0,
               "a CIFAR ResNet needs positive num_classes and in_channels, got {} and {}",
               num_classes, in_channels);
  const int64_t n = (depth - 2) / 6;
  conv1 = register_module(
      "conv1", nn::Conv2d(nn::Conv2dOptions(in_channels, 16, 3).stride(1).padding(1).bias(false)));
  bn1 = register_module("bn1", BatchNorm2d(16));
  layer1 = register_module("layer1", make_stage(16, n, 1));
  layer2 = register_module("layer2", make_stage(32, n, 2));
  layer3 = register_module("layer3", make_stage(64, n, 2));
  avgpool = register_module("avgpool", nn::AdaptiveAvgPool2d(1));
  fc = register_module("fc", nn::Linear(inplanes_, num_classes));

  init_resnet_weights(*this);
}

nn::Sequential CifarResNetImpl::make_stage(int64_t planes, int64_t blocks, int64_t stride) {
  // Option B: the block projects its shortcut where the shape changes (the first block of stages 2
  // and 3) and keeps the identity elsewhere.
  nn::Sequential stage;
  stage->push_back(BasicBlock(inplanes_, planes, stride));
  inplanes_ = planes;
  for (int64_t i = 1; i < blocks; ++i) stage->push_back(BasicBlock(inplanes_, planes, 1));
  return stage;
}

torch::Tensor CifarResNetImpl::forward(const torch::Tensor& x) {
  torch::Tensor out = torch::relu(bn1(conv1(x)));
  out = layer3->forward(layer2->forward(layer1->forward(out)));
  return fc(torch::flatten(avgpool(out), 1));
}

std::string cifar_resnet_to_onnx(onnx::OnnxExport& e, const CifarResNetImpl& net, const std::string& x) {
  std::string y = e.op("Relu", {e.child(net, "bn1", e.child(net, "conv1", x))});
  for (const char* layer : {"layer1", "layer2", "layer3"}) y = e.child(net, layer, y);
  return e.child(net, "fc", onnx_flatten(e, e.child(net, "avgpool", y)));
}

// The CIFAR ResNets: the torchvision ResNets' key, head and layer groups (resnet_type).
void register_cifar_resnet(FamilyRegistrar& r) {
  r.model("cifar_resnet20", resnet_type(&cifar_resnet20));
  r.model("cifar_resnet56", resnet_type(&cifar_resnet56));
  r.exporter<CifarResNetImpl>(&cifar_resnet_to_onnx);
}

}  // namespace stoker::models
