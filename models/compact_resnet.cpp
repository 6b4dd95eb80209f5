// The compact ResNet (models/compact_resnet.h).
#include "models/compact_resnet.h"

#include <torch/torch.h>

#include "common/error.h"
#include "models/blocks.h"
#include "models/onnx/export.h"
#include "models/registry.h"

namespace stoker::models {
namespace nn = torch::nn;

void CompactResNetOptions::visit(OptionsVisitor& v) {
  v.field("widths", widths, rules::items(rules::at_least(1), 1));
  v.field("blocks", blocks, rules::items(rules::at_least(1), 1));
  v.field("dropout", dropout, rules::unit_open());
  v.field("drop_path_rate", drop_path_rate, rules::unit_open());
}

void CompactResNetOptions::check() const {
  if (widths.empty()) STOKER_FAIL("widths must list at least one stage width");
  if (blocks.size() != widths.size()) {
    STOKER_FAIL("blocks has {} entries but widths has {}; give one block count per stage", blocks.size(),
                widths.size());
  }
}

TypedOptions compact_resnet(std::vector<int64_t> widths, std::vector<int64_t> blocks, double dropout) {
  auto options = std::make_unique<CompactResNetOptions>();
  options->widths = std::move(widths);
  options->blocks = std::move(blocks);
  options->dropout = dropout;
  return TypedOptions("compact_resnet", std::move(options));
}

std::vector<LayerGroup> compact_resnet_layer_groups() {
  return {{"stem", {{"^features\\.stem_"}}}, {"blocks", {{"^features\\.stage(\\d+)_block(\\d+)"}}}};
}

CompactResNetImpl::CompactResNetImpl(const CompactResNetOptions& spec, const ModelShape& shape) {
  spec.check();
  nn::Sequential body;
  body->push_back("stem_conv", conv3x3(shape.in_channels, spec.widths[0], 1));
  body->push_back("stem_bn", BatchNorm2d(spec.widths[0]));
  body->push_back("stem_relu", nn::ReLU(nn::ReLUOptions().inplace(true)));
  int64_t channels = spec.widths[0];
  for (size_t stage = 0; stage < spec.widths.size(); ++stage) {
    for (int64_t b = 0; b < spec.blocks[stage]; ++b) {
      const int64_t stride = (stage > 0 && b == 0) ? 2 : 1;
      body->push_back(fmt::format("stage{}_block{}", stage + 1, b),
                      BasicBlock(channels, spec.widths[stage], stride, "shortcut"));
      channels = spec.widths[stage];
    }
  }
  body->push_back("pool", nn::AdaptiveAvgPool2d(1));
  body->push_back("flatten", nn::Flatten());
  features = register_module("features", body);
  dropout = register_module("dropout", nn::Dropout(spec.dropout));
  classifier = register_module("classifier", nn::Linear(channels, shape.num_classes));
  apply_drop_path(*this, spec.drop_path_rate);
}

torch::Tensor CompactResNetImpl::forward(const torch::Tensor& x) {
  return classifier(dropout(features->forward(x)));
}

std::string compact_resnet_to_onnx(onnx::OnnxExport& e, const CompactResNetImpl& net, const std::string& x) {
  return e.child(net, "classifier", e.child(net, "dropout", e.child(net, "features", x)));
}

// compact_resnet: its head `classifier`.
void register_compact_resnet(FamilyRegistrar& r) {
  r.model("compact_resnet", model_type<CompactResNetOptions>([](const CompactResNetOptions& o, const ModelShape& s) {
                              return CompactResNet(o, s);
                            })
                                .with_head({"classifier"})
                                .with_layers(compact_resnet_layer_groups()));
  r.exporter<CompactResNetImpl>(&compact_resnet_to_onnx);
}

}  // namespace stoker::models
