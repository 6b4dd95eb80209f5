// torchvision-compatible MobileNetV3 (models/mobilenet_v3.h).
#include "models/mobilenet_v3.h"

#include <optional>
#include <regex>
#include <tuple>
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

void MobileNetV3Options::visit(OptionsVisitor& v) {
  v.field("dropout", dropout, rules::unit_open());
  v.field("drop_path_rate", drop_path_rate, rules::unit_open());
  v.field("bn_eps", bn_eps, rules::positive());
}

namespace {

// A row of torchvision's _mobilenet_v3_conf table (width multiplier 1, no dilation, full tail).
struct BlockRow {
  int64_t in, kernel, expanded, out;
  bool se, hardswish;
  int64_t stride;
};
const std::vector<BlockRow>& block_table(MobileNetV3Size size) {
  static const std::vector<BlockRow> large = {
      {16, 3, 16, 16, false, false, 1},    {16, 3, 64, 24, false, false, 2},   {24, 3, 72, 24, false, false, 1},
      {24, 5, 72, 40, true, false, 2},     {40, 5, 120, 40, true, false, 1},   {40, 5, 120, 40, true, false, 1},
      {40, 3, 240, 80, false, true, 2},    {80, 3, 200, 80, false, true, 1},   {80, 3, 184, 80, false, true, 1},
      {80, 3, 184, 80, false, true, 1},    {80, 3, 480, 112, true, true, 1},   {112, 3, 672, 112, true, true, 1},
      {112, 5, 672, 160, true, true, 2},   {160, 5, 960, 160, true, true, 1},  {160, 5, 960, 160, true, true, 1},
  };
  static const std::vector<BlockRow> small = {
      {16, 3, 16, 16, true, false, 2},  {16, 3, 72, 24, false, false, 2}, {24, 3, 88, 24, false, false, 1},
      {24, 5, 96, 40, true, true, 2},   {40, 5, 240, 40, true, true, 1},  {40, 5, 240, 40, true, true, 1},
      {40, 5, 120, 48, true, true, 1},  {48, 5, 144, 48, true, true, 1},  {48, 5, 288, 96, true, true, 2},
      {96, 5, 576, 96, true, true, 1},  {96, 5, 576, 96, true, true, 1},
  };
  return size == MobileNetV3Size::kLarge ? large : small;
}

// torchvision's partial(nn.BatchNorm2d, eps=0.001, momentum=0.01); model.bn_eps replaces the eps.
constexpr double kNormMomentum = 0.01;

}  // namespace

MobileNetV3Impl::MobileNetV3Impl(MobileNetV3Size size, const MobileNetV3Options& options, const ModelShape& shape) {
  STOKER_CHECK(shape.num_classes > 0 && shape.in_channels > 0,
               "a MobileNetV3 needs positive num_classes and in_channels, got {} and {}", shape.num_classes,
               shape.in_channels);
  const std::vector<BlockRow>& table = block_table(size);
  const NormSettings norm{options.bn_eps, kNormMomentum};
  features = nn::Sequential();
  features->push_back(
      ConvNormActivation(shape.in_channels, table.front().in, ConvNormSettings{3, 2, 1, 1, Activation::kHardswish, norm}));
  for (const BlockRow& row : table) {
    InvertedResidualSettings s;
    s.in = row.in;
    s.expanded = row.expanded;
    s.out = row.out;
    s.kernel = row.kernel;
    s.stride = row.stride;
    s.activation = row.hardswish ? Activation::kHardswish : Activation::kReLU;
    s.squeeze = row.se ? make_divisible(static_cast<double>(row.expanded / 4), 8) : 0;
    s.se_activation = Activation::kReLU;
    s.se_gate = Activation::kHardsigmoid;
    s.norm = norm;
    features->push_back(InvertedResidual(s));
  }
  const int64_t last = table.back().out, head = 6 * last;
  features->push_back(ConvNormActivation(last, head, ConvNormSettings{1, 1, 1, 1, Activation::kHardswish, norm}));
  register_module("features", features);
  const int64_t hidden = size == MobileNetV3Size::kLarge ? 1280 : 1024;
  classifier = register_module(
      "classifier", nn::Sequential(nn::Linear(head, hidden),
                                   nn::Functional([](const torch::Tensor& x) { return torch::hardswish(x); }),
                                   nn::Dropout(options.dropout), nn::Linear(hidden, shape.num_classes)));
  init_mobile_weights(*this, LinearInit::kNormal001);
  apply_stochastic_depth(*this, options.drop_path_rate);
}

torch::Tensor MobileNetV3Impl::forward(const torch::Tensor& x) {
  return classifier->forward(features->forward(x).mean({2, 3}));
}

MobileNetV3 mobilenet_v3_small(int64_t num_classes, int64_t in_channels) {
  return MobileNetV3(MobileNetV3Size::kSmall, MobileNetV3Options{}, ModelShape{in_channels, num_classes});
}

MobileNetV3 mobilenet_v3_large(int64_t num_classes, int64_t in_channels) {
  return MobileNetV3(MobileNetV3Size::kLarge, MobileNetV3Options{}, ModelShape{in_channels, num_classes});
}

std::vector<LayerGroup> mobilenet_v3_layer_groups() {
  return {{"stem", {{"^features\\.0\\."}}}, {"blocks", {{"^features\\.(\\d+)\\."}}}};
}

std::string mobilenet_v3_to_onnx(onnx::OnnxExport& e, const MobileNetV3Impl& net, const std::string& x) {
  const std::string pooled = onnx_flatten(e, e.op("GlobalAveragePool", {e.child(net, "features", x)}));
  // classifier: 0 Linear, 1 hard swish (a Functional, written here), 2 Dropout (the identity), 3 Linear.
  const torch::nn::Module& classifier = *net.named_children()["classifier"];
  const std::string path = e.path().empty() ? "classifier" : e.path() + ".classifier";
  const std::string hidden = onnx_hardswish(e, e.module(*classifier.named_children()["0"], path + ".0", pooled));
  return e.module(*classifier.named_children()["3"], path + ".3", hidden);
}

namespace {

// timm's stages of MobileNetV3's blocks (its arch_def), first to last: torchvision's features.1.. in order.
std::vector<int> timm_stage_sizes(MobileNetV3Size size) {
  return size == MobileNetV3Size::kLarge ? std::vector<int>{1, 2, 3, 4, 2, 3} : std::vector<int>{1, 2, 3, 2, 3};
}

// timm's MobileNetV3 names: conv_stem/bn1, blocks.<stage>.<block> for torchvision's features.<i> (i >= 1),
// blocks.<last>.0.conv/bn1 for the last features, conv_head (a 1x1 convolution: torchvision's linear
// classifier.0) and classifier (classifier.3).
std::vector<weights::TimmName> mobilenet_v3_timm_names(MobileNetV3Size size, const std::vector<std::string>& keys) {
  std::vector<std::string> block_of = {""};  // features.<i> -> "blocks.<stage>.<block>."
  const std::vector<int> stages = timm_stage_sizes(size);
  for (size_t s = 0; s < stages.size(); ++s) {
    for (int b = 0; b < stages[s]; ++b) block_of.push_back(fmt::format("blocks.{}.{}.", s, b));
  }
  const std::string last = "features." + std::to_string(block_of.size()) + ".";
  const std::string last_block = fmt::format("blocks.{}.0.", stages.size());
  const std::vector<std::pair<std::string, std::string>> prefixes = {{"features.0.0.", "conv_stem."}, {"features.0.1.", "bn1."},
      {last + "0.", last_block + "conv."}, {last + "1.", last_block + "bn1."}, {"classifier.0.", "conv_head."},
      {"classifier.3.", "classifier."}};
  const auto parts = timm_mobile_block_parts(keys);
  const std::regex feature(R"(features\.(\d+)\.)");
  std::smatch m;
  std::vector<weights::TimmName> out;
  for (const std::string& key : keys) {
    weights::TimmName name{key};
    const auto part = parts.find(key);
    if (part != parts.end() && std::regex_match(part->second.first, m, feature) &&
        static_cast<size_t>(std::stoi(m[1])) < block_of.size()) {
      name.name = block_of[std::stoi(m[1])] + part->second.second;
    }
    for (const auto& [from, to] : prefixes) {
      if (part == parts.end() && key.rfind(from, 0) == 0) name.name = to + key.substr(from.size());
    }
    if (key == "classifier.0.weight") name.reshape = weights::TimmReshape::kConv1x1;
    out.push_back(name);
  }
  return out;
}

}  // namespace

// timm's mobilenetv3_small_100 and mobilenetv3_large_100: the same blocks, batch-norm eps 1e-5 (model.bn_eps).
std::optional<weights::TimmDialect> mobilenet_v3_timm(const std::string& model_type) {
  for (const auto& [name, timm, size] : {std::tuple{"mobilenet_v3_small", "mobilenetv3_small_100", MobileNetV3Size::kSmall},
                                         std::tuple{"mobilenet_v3_large", "mobilenetv3_large_100", MobileNetV3Size::kLarge}}) {
    if (model_type != name) continue;
    weights::TimmNamer names = [size = size](const std::vector<std::string>& keys) {
      return mobilenet_v3_timm_names(size, keys);
    };
    return weights::make_timm_dialect("MobileNetV3", {timm}, names, 1e-5, "bn_eps");
  }
  return std::nullopt;
}

// torchvision-compatible MobileNetV3: drop_path_rate and dropout their keys; their head is `classifier`.
void register_mobilenet_v3(FamilyRegistrar& r) {
  for (const auto& [name, size] : {std::pair{"mobilenet_v3_small", MobileNetV3Size::kSmall},
                                   std::pair{"mobilenet_v3_large", MobileNetV3Size::kLarge}}) {
    r.model(name, model_type<MobileNetV3Options>(
                      [size = size](const MobileNetV3Options& o, const ModelShape& s) { return MobileNetV3(size, o, s); })
                      .with_head({"classifier"})
                      .with_layers(mobilenet_v3_layer_groups()));
  }
  r.exporter<MobileNetV3Impl>(&mobilenet_v3_to_onnx);
}

}  // namespace stoker::models
