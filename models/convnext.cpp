// torchvision-compatible ConvNeXt (models/convnext.h).
#include "models/convnext.h"

#include <algorithm>
#include <map>
#include <optional>
#include <regex>

#include <fmt/format.h>
#include <torch/torch.h>

#include "common/error.h"
#include "models/blocks.h"
#include "models/init.h"
#include "models/onnx/export.h"
#include "models/onnx/nn.h"
#include "models/registry.h"
#include "models/timm.h"

namespace stoker::models {
namespace nn = torch::nn;

// ---- options --------------------------------------------------------------------------------------

std::optional<ConvNextConfig> named_convnext(const std::string& name) {
  // torchvision.models.convnext_tiny / small / base: the stages' widths and depths.
  if (name == "convnext_tiny") return ConvNextConfig{name, {96, 192, 384, 768}, {3, 3, 9, 3}};
  if (name == "convnext_small") return ConvNextConfig{name, {96, 192, 384, 768}, {3, 3, 27, 3}};
  if (name == "convnext_base") return ConvNextConfig{name, {128, 256, 512, 1024}, {3, 3, 27, 3}};
  return std::nullopt;
}

namespace {
void visit_training_keys(OptionsVisitor& v, ConvNextConfig& c) {
  v.field("drop_path_rate", c.drop_path_rate, rules::unit_open());
  v.field("layer_scale", c.layer_scale, rules::positive());
}

void check_config(const ConvNextConfig& c) {
  if (c.widths.empty() || c.widths.size() != c.depths.size()) {
    STOKER_FAIL("widths and depths need one entry per stage each, got {} and {}", c.widths.size(), c.depths.size());
  }
}
}  // namespace

void ConvNextOptions::visit(OptionsVisitor& v) { visit_training_keys(v, config); }

void ConvNextCustomOptions::visit(OptionsVisitor& v) {
  v.field("widths", config.widths, rules::items(rules::at_least(1), 1));
  v.field("depths", config.depths, rules::items(rules::at_least(1), 1));
  visit_training_keys(v, config);
}
void ConvNextCustomOptions::check() const { check_config(config); }

// ---- modules ----------------------------------------------------------------------------------------

LayerNorm2dImpl::LayerNorm2dImpl(int64_t channels, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({channels}));
  bias = register_parameter("bias", torch::zeros({channels}));
}

torch::Tensor LayerNorm2dImpl::forward(const torch::Tensor& x) {
  return torch::layer_norm(x.permute({0, 2, 3, 1}), {weight.size(0)}, weight, bias, eps_).permute({0, 3, 1, 2});
}

CNBlockImpl::CNBlockImpl(int64_t dim, double layer_scale_value, double drop_path_rate) : drop_path_(drop_path_rate) {
  dwconv = nn::Conv2d(nn::Conv2dOptions(dim, dim, 7).padding(3).groups(dim));
  norm = nn::LayerNorm(nn::LayerNormOptions({dim}).eps(1e-6));
  fc1 = nn::Linear(dim, 4 * dim);
  fc2 = nn::Linear(4 * dim, dim);
  // torchvision's block.0 .. block.6; the permutes and GELU hold nothing, forward() calls the rest.
  const auto permute = [](std::vector<int64_t> order) {
    return nn::Functional([order](const torch::Tensor& t) { return t.permute(order); });
  };
  block = register_module("block", nn::Sequential(dwconv, permute({0, 2, 3, 1}), norm, fc1, nn::GELU(), fc2,
                                                  permute({0, 3, 1, 2})));
  layer_scale = register_parameter("layer_scale", torch::full({dim, 1, 1}, layer_scale_value));
}

torch::Tensor CNBlockImpl::forward(const torch::Tensor& x) {
  // model.activation_checkpointing: recomputed in backward when chosen (models/activation_checkpointing.h).
  return run_block(*this, x, [this](const torch::Tensor& in) {
    // [N, C, H, W] -> channels last for the norm and the two linear layers -> back.
    const torch::Tensor y = fc2(torch::gelu(fc1(norm(dwconv(in).permute({0, 2, 3, 1}))))).permute({0, 3, 1, 2});
    return in + drop_path(layer_scale * y, drop_path_, is_training());
  });
}

ConvNextImpl::ConvNextImpl(const ConvNextConfig& c, const ModelShape& shape) : config_(c) {
  check_config(c);
  STOKER_CHECK(shape.num_classes > 0 && shape.in_channels > 0,
               "model.type {} needs positive num_classes and in_channels, got {} and {}", c.name, shape.num_classes,
               shape.in_channels);
  const auto stages = static_cast<int64_t>(c.widths.size());
  const int64_t smallest = 4 << (stages - 1);  // the stem's stride 4, then 2 per downsampling
  if ((shape.height > 0 && shape.height < smallest) || (shape.width > 0 && shape.width < smallest)) {
    STOKER_FAIL("model.type {}: the input is {}x{} pixels, but its stem and {} downsampling(s) need at least {}x{}; "
                "make the data's transforms end at {} pixels or more (a resize)",
                c.name, shape.height, shape.width, stages - 1, smallest, smallest, smallest);
  }
  features = register_module("features", nn::ModuleList());
  stem_conv = nn::Conv2d(nn::Conv2dOptions(shape.in_channels, c.widths[0], 4).stride(4));
  stem_norm = LayerNorm2d(c.widths[0]);
  features->push_back(nn::Sequential(stem_conv, stem_norm));
  int64_t total = 0;
  for (const int64_t d : c.depths) total += d;
  const std::vector<double> rates = drop_path_rates(c.drop_path_rate, total);
  size_t next = 0;
  for (int64_t s = 0; s < stages; ++s) {
    nn::Sequential stage;
    stages_.emplace_back();
    for (int64_t b = 0; b < c.depths[static_cast<size_t>(s)]; ++b) {
      stages_.back().push_back(CNBlock(c.widths[static_cast<size_t>(s)], c.layer_scale, rates[next++]));
      stage->push_back(stages_.back().back());
    }
    features->push_back(stage);
    if (s + 1 == stages) break;
    downsamples_.emplace_back(
        LayerNorm2d(c.widths[static_cast<size_t>(s)]),
        nn::Conv2d(nn::Conv2dOptions(c.widths[static_cast<size_t>(s)], c.widths[static_cast<size_t>(s) + 1], 2).stride(2)));
    features->push_back(nn::Sequential(downsamples_.back().first, downsamples_.back().second));
  }
  head_norm = LayerNorm2d(c.widths.back());
  head = nn::Linear(c.widths.back(), shape.num_classes);
  classifier = register_module("classifier", nn::Sequential(head_norm, nn::Flatten(nn::FlattenOptions().start_dim(1)), head));
  torch::NoGradGuard no_grad;
  for (const auto& m : modules(/*include_self=*/false)) {
    torch::Tensor weight, bias;
    if (auto* conv = m->as<nn::Conv2d>()) {
      weight = conv->weight, bias = conv->bias;
    } else if (auto* linear = m->as<nn::Linear>()) {
      weight = linear->weight, bias = linear->bias;
    } else {
      continue;
    }
    trunc_normal_(weight, 0.02);
    bias.zero_();
  }
}

torch::Tensor ConvNextImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = stem_norm(stem_conv(x));
  for (size_t s = 0; s < stages_.size(); ++s) {
    for (CNBlock& block : stages_[s]) y = block(y);
    if (s < downsamples_.size()) y = downsamples_[s].second(downsamples_[s].first(y));
  }
  // Average pooling to 1x1, then the classifier's LayerNorm2d (over the channels) and Linear.
  return head(head_norm(torch::adaptive_avg_pool2d(y, {1, 1})).flatten(1));
}

std::vector<LayerGroup> convnext_layer_groups() {
  // timm keys a downsampling (stage, 0), as its stage's first block: features.<2s> joins features.<2s+1>.0.
  std::vector<LayerRule> blocks;
  for (int s = 1; s < 8; ++s) {
    blocks.push_back({fmt::format("^features\\.{}\\.", 2 * s), {2.0 * s + 1, 0.0}});
  }
  blocks.push_back({"^features\\.(\\d+)\\.(\\d+)\\."});
  return {{"stem", {{"^features\\.0\\."}}}, {"blocks", blocks}};
}

namespace {
const std::vector<int64_t> kChannelsLast = {0, 2, 3, 1}, kChannelsFirst = {0, 3, 1, 2};
}  // namespace

std::string layer_norm2d_to_onnx(onnx::OnnxExport& e, const LayerNorm2dImpl& norm, const std::string& x) {
  const std::string last = e.op("Transpose", {x}, {{"perm", kChannelsLast}});
  const std::string normed = onnx_layer_norm(e, last, e.param("weight"), e.param("bias"), norm.eps());
  return e.op("Transpose", {normed}, {{"perm", kChannelsFirst}});
}

std::string cn_block_to_onnx(onnx::OnnxExport& e, const CNBlockImpl& block, const std::string& x) {
  // block: 0 depthwise conv, 1 permute (a Functional, written here), 2 LayerNorm, 3 Linear, 4 GELU,
  // 5 Linear, 6 permute back; then layer_scale and the residual (stochastic depth the identity).
  const auto parts = block.named_children()["block"]->named_children();
  const std::string path = (e.path().empty() ? "" : e.path() + ".") + "block.";
  const auto part = [&](const std::string& i, const std::string& in) { return e.module(*parts[i], path + i, in); };
  std::string y = e.op("Transpose", {part("0", x)}, {{"perm", kChannelsLast}});
  y = part("5", part("4", part("3", part("2", y))));
  y = e.op("Transpose", {y}, {{"perm", kChannelsFirst}});
  return e.op("Add", {x, e.op("Mul", {y, e.param("layer_scale")})});
}

std::string convnext_to_onnx(onnx::OnnxExport& e, const ConvNextImpl& net, const std::string& x) {
  // The features in order (a ModuleList handed on whole), average pooling, the classifier (its
  // LayerNorm2d, flatten, Linear).
  return e.child(net, "classifier", e.op("GlobalAveragePool", {e.child(net, "features", x)}));
}

namespace {

// A ConvNeXt type: torchvision's named architecture (ConvNextOptions) or the configurable one; its
// head `classifier` (its last norm and linear).
template <typename Options>
ModelType convnext_type(const std::string& name) {
  return model_type<Options>([name](const Options& o, const ModelShape& s) {
           ConvNextConfig config = o.config;
           if (const std::optional<ConvNextConfig> fixed = named_convnext(name)) {
             config = *fixed;
             config.drop_path_rate = o.config.drop_path_rate;
             config.layer_scale = o.config.layer_scale;
           }
           config.name = name;
           return ConvNext(config, s);
         })
      .with_head({"classifier"})
      .with_layers(convnext_layer_groups());
}

}  // namespace

namespace {

// timm's ConvNeXt names: stem.0/1; stages.<s>.blocks.<b> for torchvision's features.<2s + 1>.<b> (conv_dw,
// norm, mlp.fc1, mlp.fc2 for block.0/2/3/5, gamma [C] for layer_scale [C, 1, 1]); stages.<s>.downsample.0/1
// for features.<2s>.0/1; head.norm and head.fc for classifier.0 and classifier.2.
std::vector<weights::TimmName> convnext_timm_names(const std::vector<std::string>& keys) {
  static const std::map<std::string, std::string> inner = {{"0", "conv_dw"}, {"2", "norm"}, {"3", "mlp.fc1"}, {"5", "mlp.fc2"}};
  const std::regex block(R"(features\.(\d+)\.(\d+)\.(block\.(\d+)\.|layer_scale)(.*))");
  const std::regex down(R"(features\.(\d+)\.([01])\.(.*))");
  const std::vector<std::pair<std::string, std::string>> prefixes = {
      {"features.0.0.", "stem.0."}, {"features.0.1.", "stem.1."}, {"classifier.0.", "head.norm."}, {"classifier.2.", "head.fc."}};
  std::vector<weights::TimmName> out;
  std::smatch m;
  for (const std::string& key : keys) {
    weights::TimmName name{key};
    const auto prefix = std::find_if(prefixes.begin(), prefixes.end(), [&](const auto& p) { return key.rfind(p.first, 0) == 0; });
    if (prefix != prefixes.end()) {
      name.name = prefix->second + key.substr(prefix->first.size());
    } else if (std::regex_match(key, m, block) && std::stoi(m[1]) % 2 == 1) {
      const std::string at = fmt::format("stages.{}.blocks.{}.", (std::stoi(m[1]) - 1) / 2, m[2].str());
      if (m[3] == "layer_scale") {
        name = {at + "gamma", weights::TimmReshape::kVector};
      } else if (inner.count(m[4])) {
        name.name = at + inner.at(m[4]) + "." + m[5].str();
      }
    } else if (std::regex_match(key, m, down) && std::stoi(m[1]) % 2 == 0) {
      name.name = fmt::format("stages.{}.downsample.{}.{}", std::stoi(m[1]) / 2, m[2].str(), m[3].str());
    }
    out.push_back(name);
  }
  return out;
}

}  // namespace

// timm's ConvNeXts with a linear MLP and the head's norm after pooling (LayerNorm eps 1e-6, exact GELU, as
// Stoker's): convnext_tiny, small, base (and, for the configurable convnext, large and xlarge).
std::optional<weights::TimmDialect> convnext_timm(const std::string& model_type) {
  std::vector<std::string> archs;
  if (model_type == "convnext") {
    archs = {"convnext_tiny", "convnext_small", "convnext_base", "convnext_large", "convnext_xlarge"};
  } else if (model_type == "convnext_tiny" || model_type == "convnext_small" || model_type == "convnext_base") {
    archs = {model_type};
  } else {
    return std::nullopt;
  }
  weights::TimmDialect dialect = weights::make_timm_dialect("ConvNeXt", archs, &convnext_timm_names);
  dialect.shape_args = {"depths", "dims"};
  return dialect;
}

// torchvision-compatible ConvNeXts, named and configurable.
void register_convnext(FamilyRegistrar& r) {
  for (const char* name : {"convnext_tiny", "convnext_small", "convnext_base"}) {
    r.model(name, convnext_type<ConvNextOptions>(name));
  }
  r.model("convnext", convnext_type<ConvNextCustomOptions>("convnext"));
  r.exporter<LayerNorm2dImpl>(&layer_norm2d_to_onnx);
  r.exporter<CNBlockImpl>(&cn_block_to_onnx);
  r.exporter<ConvNextImpl>(&convnext_to_onnx);
}

}  // namespace stoker::models
