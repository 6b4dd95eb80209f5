// torchvision-compatible ResNets (models/resnet.h): the network, its stages and its initialisation.
#include "models/resnet.h"

#include <optional>

#include <torch/torch.h>

#include "common/error.h"
#include "models/blocks.h"
#include "models/onnx/export.h"
#include "models/onnx/nn.h"
#include "models/registry.h"
#include "models/timm.h"

namespace stoker::models {

std::vector<LayerGroup> resnet_layer_groups() {
  return {{"stem", {{"^conv1|bn1|maxpool"}}}, {"blocks", {{"^layer(\\d+)\\.(\\d+)"}}}};
}
namespace nn = torch::nn;

void ResNetOptions::visit(OptionsVisitor& v) {
  v.field("drop_path_rate", drop_path_rate, rules::unit_open());
}

void init_resnet_weights(torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  for (const auto& m : model.modules(/*include_self=*/false)) {
    if (auto* conv = m->as<nn::Conv2d>()) {
      nn::init::kaiming_normal_(conv->weight, 0.0, torch::kFanOut, torch::kReLU);
    } else if (auto* bn = m->as<nn::BatchNorm2d>()) {
      nn::init::ones_(bn->weight);
      nn::init::zeros_(bn->bias);
    }
  }
}

ResNetImpl::ResNetImpl(ResNetBlock block, std::vector<int64_t> layers, int64_t num_classes,
                       int64_t in_channels) {
  STOKER_CHECK(layers.size() == 4, "a ResNet has 4 stages, got {} block counts", layers.size());
  STOKER_CHECK(num_classes > 0 && in_channels > 0,
               "a ResNet needs positive num_classes and in_channels, got {} and {}", num_classes,
               in_channels);
  conv1 = register_module(
      "conv1", nn::Conv2d(nn::Conv2dOptions(in_channels, 64, 7).stride(2).padding(3).bias(false)));
  bn1 = register_module("bn1", BatchNorm2d(64));
  maxpool = register_module("maxpool", nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1)));
  layer1 = register_module("layer1", make_layer(block, 64, layers[0], 1));
  layer2 = register_module("layer2", make_layer(block, 128, layers[1], 2));
  layer3 = register_module("layer3", make_layer(block, 256, layers[2], 2));
  layer4 = register_module("layer4", make_layer(block, 512, layers[3], 2));
  avgpool = register_module("avgpool", nn::AdaptiveAvgPool2d(1));
  fc = register_module("fc", nn::Linear(inplanes_, num_classes));

  init_resnet_weights(*this);
}

nn::Sequential ResNetImpl::make_layer(ResNetBlock block, int64_t planes, int64_t blocks,
                                      int64_t stride) {
  // Each block decides its own shortcut: a projection where the first one changes the shape.
  auto make_block = [&](int64_t inplanes, int64_t s) {
    return block == ResNetBlock::basic ? nn::AnyModule(BasicBlock(inplanes, planes, s))
                                       : nn::AnyModule(Bottleneck(inplanes, planes, s));
  };
  const int64_t expansion =
      block == ResNetBlock::basic ? BasicBlockImpl::expansion : BottleneckImpl::expansion;
  nn::Sequential layer;
  layer->push_back(make_block(inplanes_, stride));
  inplanes_ = planes * expansion;
  for (int64_t i = 1; i < blocks; ++i) layer->push_back(make_block(inplanes_, 1));
  return layer;
}

torch::Tensor ResNetImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = maxpool(torch::relu(bn1(conv1(x))));
  y = layer4->forward(layer3->forward(layer2->forward(layer1->forward(y))));
  return fc(torch::flatten(avgpool(y), 1));
}

std::string resnet_to_onnx(onnx::OnnxExport& e, const ResNetImpl& net, const std::string& x) {
  std::string y = e.op("Relu", {e.child(net, "bn1", e.child(net, "conv1", x))});
  y = e.child(net, "maxpool", y);
  for (const char* layer : {"layer1", "layer2", "layer3", "layer4"}) y = e.child(net, layer, y);
  return e.child(net, "fc", onnx_flatten(e, e.child(net, "avgpool", y)));
}

ResNet resnet18(int64_t num_classes, int64_t in_channels) {
  return ResNet(ResNetBlock::basic, std::vector<int64_t>{2, 2, 2, 2}, num_classes, in_channels);
}
ResNet resnet34(int64_t num_classes, int64_t in_channels) {
  return ResNet(ResNetBlock::basic, std::vector<int64_t>{3, 4, 6, 3}, num_classes, in_channels);
}
ResNet resnet50(int64_t num_classes, int64_t in_channels) {
  return ResNet(ResNetBlock::bottleneck, std::vector<int64_t>{3, 4, 6, 3}, num_classes,
                in_channels);
}
ResNet resnet101(int64_t num_classes, int64_t in_channels) {
  return ResNet(ResNetBlock::bottleneck, std::vector<int64_t>{3, 4, 23, 3}, num_classes,
                in_channels);
}

ModelType resnet_type(std::function<torch::nn::AnyModule(int64_t num_classes, int64_t in_channels)> build) {
  return ModelType{options_of<ResNetOptions>(), [build](const TypeOptions& own, const ModelShape& s) {
                     torch::nn::AnyModule model = build(s.num_classes, s.in_channels);
                     apply_drop_path(*model.ptr(), dynamic_cast<const ResNetOptions&>(own).drop_path_rate);
                     return model;
                   }}
      .with_head({"fc"})
      .with_layers(resnet_layer_groups());
}

// timm's ResNets of the same names (the torchvision layout: stride on the 3x3 convolution, a 1x1 shortcut).
std::optional<weights::TimmDialect> resnet_timm(const std::string& model_type) {
  for (const char* name : {"resnet18", "resnet34", "resnet50", "resnet101"}) {
    if (model_type == name) return weights::make_timm_dialect("ResNet", {name}, nullptr, 1e-5);
  }
  return std::nullopt;
}

// torchvision-compatible ResNets: drop_path_rate their one key; the data gives in_channels and
// num_classes. Their head is `fc`, their layers timm's ResNet.group_matcher's.
void register_resnet(FamilyRegistrar& r) {
  r.model("resnet18", resnet_type(&resnet18));
  r.model("resnet34", resnet_type(&resnet34));
  r.model("resnet50", resnet_type(&resnet50));
  r.model("resnet101", resnet_type(&resnet101));
  r.exporter<ResNetImpl>(&resnet_to_onnx);
}

}  // namespace stoker::models
