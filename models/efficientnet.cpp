// torchvision-compatible EfficientNet-B0..B3 (models/efficientnet.h).
#include "models/efficientnet.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <optional>
#include <regex>
#include <vector>

#include <fmt/format.h>
#include <torch/torch.h>

#include "common/error.h"
#include "models/mobile_blocks.h"
#include "models/onnx/export.h"
#include "models/onnx/nn.h"
#include "models/registry.h"
#include "models/timm.h"

namespace stoker::models {
namespace nn = torch::nn;

void EfficientNetOptions::visit(OptionsVisitor& v) {
  v.field("drop_path_rate", drop_path_rate, rules::unit_open());
  v.field("dropout", dropout, rules::unit_open());
}

const EfficientNetVariant& efficientnet_variant(const std::string& name) {
  static const std::vector<EfficientNetVariant> variants = {
      {"efficientnet_b0", 1.0, 1.0, 0.2},
      {"efficientnet_b1", 1.0, 1.1, 0.2},
      {"efficientnet_b2", 1.1, 1.2, 0.3},
      {"efficientnet_b3", 1.2, 1.4, 0.3},
  };
  for (const EfficientNetVariant& v : variants) {
    if (v.name == name) return v;
  }
  STOKER_FAIL("unknown EfficientNet variant '{}'; known: efficientnet_b0, efficientnet_b1, efficientnet_b2, "
              "efficientnet_b3",
              name);
}

namespace {

// A row of torchvision's MBConv table (B0, before scaling).
struct StageRow {
  int64_t expand_ratio, kernel, stride, in, out, layers;
};
constexpr StageRow kStages[] = {
    {1, 3, 1, 32, 16, 1}, {6, 3, 2, 16, 24, 2},   {6, 5, 2, 24, 40, 2}, {6, 3, 2, 40, 80, 3},
    {6, 5, 1, 80, 112, 3}, {6, 5, 2, 112, 192, 4}, {6, 3, 1, 192, 320, 1},
};

// MBConvConfig.adjust_channels and adjust_depth.
int64_t scaled_width(int64_t channels, double width_mult) {
  return make_divisible(static_cast<double>(channels) * width_mult, 8);
}
int64_t scaled_depth(int64_t layers, double depth_mult) {
  return static_cast<int64_t>(std::ceil(static_cast<double>(layers) * depth_mult));
}

// One MBConv block: SiLU everywhere, squeeze-excitation to a quarter of the block's input width.
InvertedResidual mbconv(int64_t in, int64_t out, int64_t expand_ratio, int64_t kernel, int64_t stride) {
  InvertedResidualSettings s;
  s.in = in;
  s.expanded = make_divisible(static_cast<double>(in) * static_cast<double>(expand_ratio), 8);
  s.out = out;
  s.kernel = kernel;
  s.stride = stride;
  s.activation = Activation::kSiLU;
  s.squeeze = std::max<int64_t>(1, in / 4);
  s.se_activation = Activation::kSiLU;
  s.se_gate = Activation::kSigmoid;
  return InvertedResidual(s);
}

}  // namespace

EfficientNetImpl::EfficientNetImpl(const EfficientNetVariant& variant, const EfficientNetOptions& options,
                                   const ModelShape& shape) {
  STOKER_CHECK(shape.num_classes > 0 && shape.in_channels > 0,
               "an EfficientNet needs positive num_classes and in_channels, got {} and {}", shape.num_classes,
               shape.in_channels);
  const double w = variant.width_mult;
  features = register_module("features", nn::ModuleList());
  const auto add = [this](auto module) {  // a ConvNormActivation or a stage's Sequential
    features->push_back(module);
    forward_features_.emplace_back([m = module.ptr()](const torch::Tensor& x) { return m->forward(x); });
  };
  const int64_t stem = scaled_width(kStages[0].in, w);
  add(ConvNormActivation(shape.in_channels, stem, ConvNormSettings{3, 2, 1, 1, Activation::kSiLU, {}}));
  for (const StageRow& row : kStages) {
    nn::Sequential stage;
    const int64_t in = scaled_width(row.in, w), out = scaled_width(row.out, w);
    for (int64_t i = 0; i < scaled_depth(row.layers, variant.depth_mult); ++i) {
      stage->push_back(mbconv(i == 0 ? in : out, out, row.expand_ratio, row.kernel, i == 0 ? row.stride : 1));
    }
    add(stage);
  }
  const int64_t last = scaled_width(kStages[std::size(kStages) - 1].out, w);
  add(ConvNormActivation(last, 4 * last, ConvNormSettings{1, 1, 1, 1, Activation::kSiLU, {}}));
  classifier = register_module(
      "classifier", nn::Sequential(nn::Dropout(options.dropout), nn::Linear(4 * last, shape.num_classes)));
  init_mobile_weights(*this, LinearInit::kUniformByOutputs);
  apply_stochastic_depth(*this, options.drop_path_rate);
}

torch::Tensor EfficientNetImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = x;
  for (const auto& f : forward_features_) y = f(y);
  return classifier->forward(y.mean({2, 3}));
}

EfficientNet efficientnet(const std::string& name, int64_t num_classes, int64_t in_channels) {
  const EfficientNetVariant& variant = efficientnet_variant(name);
  EfficientNetOptions options;
  options.dropout = variant.dropout;
  return EfficientNet(variant, options, ModelShape{in_channels, num_classes});
}

std::vector<LayerGroup> efficientnet_layer_groups() {
  return {{"stem", {{"^features\\.0\\."}}},
          {"blocks", {{"^features\\.8\\.", {kMatchPrevious}}, {"^features\\.(\\d+)\\.(\\d+)\\."}}}};
}

std::string efficientnet_to_onnx(onnx::OnnxExport& e, const EfficientNetImpl& net, const std::string& x) {
  // The features in order (a ModuleList handed on whole), average pooling, the classifier.
  const std::string pooled = e.op("GlobalAveragePool", {e.child(net, "features", x)});
  return e.child(net, "classifier", onnx_flatten(e, pooled));
}

namespace {

// timm's EfficientNet names: conv_stem/bn1, blocks.<stage>.<block> (torchvision's features.<stage + 1>.<block>),
// conv_head/bn2 (the last features), classifier (torchvision's classifier.1).
std::vector<weights::TimmName> efficientnet_timm_names(const std::vector<std::string>& keys) {
  const auto parts = timm_mobile_block_parts(keys);
  int last = 0;
  const std::regex top(R"(features\.(\d+)\..*)"), block(R"(features\.(\d+)\.(\d+)\.)");
  std::smatch m;
  for (const std::string& key : keys) {
    if (std::regex_match(key, m, top)) last = std::max(last, std::stoi(m[1]));
  }
  const std::vector<std::pair<std::string, std::string>> prefixes = {
      {"features.0.0.", "conv_stem."}, {"features.0.1.", "bn1."}, {"features." + std::to_string(last) + ".0.", "conv_head."},
      {"features." + std::to_string(last) + ".1.", "bn2."}, {"classifier.1.", "classifier."}};
  std::vector<weights::TimmName> out;
  for (const std::string& key : keys) {
    std::string name = key;
    if (const auto part = parts.find(key); part != parts.end()) {
      if (std::regex_match(part->second.first, m, block)) {
        name = fmt::format("blocks.{}.{}.{}", std::stoi(m[1]) - 1, m[2].str(), part->second.second);
      }
    } else {
      for (const auto& [from, to] : prefixes) {
        if (key.rfind(from, 0) == 0) name = to + key.substr(from.size());
      }
    }
    out.push_back({name});
  }
  return out;
}

}  // namespace

// timm's efficientnet_b0..b3 (not the tf_ ports): the same blocks, batch-norm eps 1e-5 as Stoker's.
std::optional<weights::TimmDialect> efficientnet_timm(const std::string& model_type) {
  for (const char* name : {"efficientnet_b0", "efficientnet_b1", "efficientnet_b2", "efficientnet_b3"}) {
    if (model_type == name) return weights::make_timm_dialect("EfficientNet", {name}, &efficientnet_timm_names, 1e-5);
  }
  return std::nullopt;
}

namespace {

// An EfficientNet variant, its keys' defaults torchvision's for the variant (the classifier's dropout).
ModelType efficientnet_type(const std::string& name) {
  const EfficientNetVariant variant = efficientnet_variant(name);
  ModelType type = model_type<EfficientNetOptions>(
      [variant](const EfficientNetOptions& o, const ModelShape& s) { return EfficientNet(variant, o, s); });
  type.options = [variant] {
    auto options = std::make_unique<EfficientNetOptions>();
    options->dropout = variant.dropout;
    return options;
  };
  return type.with_head({"classifier"}).with_layers(efficientnet_layer_groups());
}

}  // namespace

// torchvision-compatible EfficientNet-B0..B3: drop_path_rate and dropout their keys; their head is
// `classifier`.
void register_efficientnet(FamilyRegistrar& r) {
  for (const char* name : {"efficientnet_b0", "efficientnet_b1", "efficientnet_b2", "efficientnet_b3"}) {
    r.model(name, efficientnet_type(name));
  }
  r.exporter<EfficientNetImpl>(&efficientnet_to_onnx);
}

}  // namespace stoker::models
