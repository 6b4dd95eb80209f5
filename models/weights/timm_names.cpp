// timm's names for Stoker's tensors (models/weights/timm_names.h).
#include "models/weights/timm_names.h"

#include <algorithm>
#include <map>
#include <regex>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/nn/modules/batchnorm.h>

#include "common/error.h"

namespace stoker::models::weights {
namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// timm's shape of a tensor of the model's shape `sizes`.
at::Tensor to_timm_shape(const at::Tensor& t, TimmReshape reshape) {
  switch (reshape) {
    case TimmReshape::kVector: return t.reshape({t.size(0)});
    case TimmReshape::kConv1x1: return t.dim() == 2 ? t.reshape({t.size(0), t.size(1), 1, 1}) : t;
    case TimmReshape::kSame: break;
  }
  return t;
}

// The model's shape of a tensor in timm's shape; anything else as it is (the fit reports it).
at::Tensor from_timm_shape(const at::Tensor& t, TimmReshape reshape) {
  if (reshape == TimmReshape::kVector && t.dim() == 1) return t.reshape({t.size(0), 1, 1});
  if (reshape == TimmReshape::kConv1x1 && t.dim() == 4 && t.size(2) == 1 && t.size(3) == 1) {
    return t.reshape({t.size(0), t.size(1)});
  }
  return t;
}

std::vector<std::string> keys_of(const NamedTensors& tensors) {
  std::vector<std::string> keys;
  for (const auto& t : tensors) keys.push_back(t.first);
  return keys;
}

}  // namespace

TimmDialect make_timm_dialect(std::string timm_family, std::vector<std::string> architectures, TimmNamer names,
                              double bn_eps, std::string bn_eps_key) {
  TimmDialect d;
  d.timm_family = std::move(timm_family);
  d.architectures = std::move(architectures);
  d.names = std::move(names);
  d.bn_eps = bn_eps;
  d.bn_eps_key = std::move(bn_eps_key);
  return d;
}

TimmNamer timm_rules(const std::vector<TimmRule>& rules) {
  std::vector<std::pair<std::regex, TimmRule>> compiled;
  for (const TimmRule& rule : rules) compiled.emplace_back(std::regex(rule.pattern), rule);
  return [compiled](const std::vector<std::string>& keys) {
    std::vector<TimmName> out;
    for (const std::string& key : keys) {
      TimmName name{key};
      for (const auto& [pattern, rule] : compiled) {
        if (!std::regex_match(key, pattern)) continue;
        name = {std::regex_replace(key, pattern, rule.timm), rule.reshape};
        break;
      }
      out.push_back(name);
    }
    return out;
  };
}

std::vector<std::pair<std::string, TimmName>> timm_key_map(const TimmDialect& dialect,
                                                           const std::vector<std::string>& model_keys) {
  std::vector<std::pair<std::string, TimmName>> out;
  if (!dialect.names) {
    for (const std::string& key : model_keys) out.emplace_back(key, TimmName{key});
    return out;
  }
  const std::vector<TimmName> names = dialect.names(model_keys);
  STOKER_CHECK(names.size() == model_keys.size(), "the {} naming gave {} names for {} keys", dialect.timm_family,
               names.size(), model_keys.size());
  std::map<std::string, std::string> seen;
  for (size_t i = 0; i < names.size(); ++i) {
    const auto [it, fresh] = seen.emplace(names[i].name, model_keys[i]);
    STOKER_CHECK(fresh, "the {} naming gives {} and {} one timm name, {}", dialect.timm_family, it->second,
                 model_keys[i], names[i].name);
    out.emplace_back(model_keys[i], names[i]);
  }
  return out;
}

bool names_are_timms(const TimmDialect& dialect, const std::vector<std::string>& model_keys, const NamedTensors& file) {
  if (!dialect.names) return false;
  std::set<std::string> own(model_keys.begin(), model_keys.end()), timm;
  for (const auto& [key, name] : timm_key_map(dialect, model_keys)) timm.insert(name.name);
  size_t as_own = 0, as_timm = 0;
  for (const auto& [key, tensor] : file) {
    as_own += own.count(key);
    as_timm += timm.count(key);
  }
  return as_timm > as_own;
}

void from_timm_names(const TimmDialect& dialect, const std::vector<std::string>& model_keys, NamedTensors& tensors) {
  std::map<std::string, std::pair<std::string, TimmReshape>> back;  // timm name -> (model key, reshape)
  for (const auto& [key, name] : timm_key_map(dialect, model_keys)) back[name.name] = {key, name.reshape};
  for (auto& [key, tensor] : tensors) {
    const auto found = back.find(key);
    if (found == back.end()) continue;
    key = found->second.first;
    tensor = from_timm_shape(tensor, found->second.second);
  }
}

NamedTensors to_timm_names(const TimmDialect& dialect, const NamedTensors& state) {
  const std::vector<std::pair<std::string, TimmName>> map = timm_key_map(dialect, keys_of(state));
  NamedTensors out;
  for (size_t i = 0; i < state.size(); ++i) {
    out.emplace_back(map[i].second.name, to_timm_shape(state[i].second, map[i].second.reshape));
  }
  return out;
}

std::string timm_numerics_differ(const TimmDialect& dialect, const torch::nn::Module& model, const std::string& what) {
  if (dialect.bn_eps <= 0) return "";
  for (const auto& item : model.named_modules()) {
    const auto* bn = dynamic_cast<const torch::nn::BatchNorm2dImpl*>(item.value().get());
    if (bn == nullptr || bn->options.eps() == dialect.bn_eps) continue;
    std::string line = fmt::format("timm's {} normalises with batch-norm eps {:g}, {} with {:g} ({})", dialect.timm_family,
                                   dialect.bn_eps, what, bn->options.eps(), item.key());
    if (!dialect.bn_eps_key.empty()) {
      line += fmt::format("; set model.{}: {:g} to compute as the weights were trained", dialect.bn_eps_key,
                          dialect.bn_eps);
    }
    return line;
  }
  return "";
}

void check_timm_architecture(const TimmDialect& dialect, const std::string& architecture, const std::string& source,
                             const std::string& what) {
  const auto& archs = dialect.architectures;
  if (architecture.empty() || std::find(archs.begin(), archs.end(), architecture) != archs.end()) return;
  std::string why = "another architecture";
  if (starts_with(architecture, "tf_")) {
    why = "a port of TensorFlow's weights, which pads 'same' as TensorFlow does and normalises with batch-norm eps "
          "1e-3; Stoker's layers pad symmetrically";
  } else if (starts_with(architecture, "resnet") && !architecture.empty() && architecture.back() == 'd') {
    why = "ResNet-D: a deep stem of three convolutions and an average-pooled shortcut";
  }
  STOKER_FAIL("model.pretrained {} holds timm's {} ({}), which {} does not compute; {} takes timm's {}", source,
              architecture, why, what, what, fmt::join(archs, ", "));
}

void check_timm_model_args(const TimmDialect& dialect, const torch::nn::Module& model,
                           const std::vector<std::pair<std::string, std::string>>& args, const std::string& source,
                           const std::string& what) {
  static const std::set<std::string> harmless = {"num_classes", "in_chans", "img_size", "drop_rate", "drop_path_rate",
                                                 "dynamic_img_size", "pretrained_cfg"};
  const auto& shaped = dialect.shape_args;
  for (const auto& [key, value] : args) {
    if (harmless.count(key) || std::find(shaped.begin(), shaped.end(), key) != shaped.end()) continue;
    std::string why;
    if (key == "global_pool") {
      if (value == "\"" + dialect.global_pool + "\"") continue;
      why = fmt::format("{} pools with \"{}\"", what, dialect.global_pool);
    } else if (dialect.check_arg) {
      why = dialect.check_arg(model, key, value);
      if (why.empty()) continue;
    } else {
      why = fmt::format("{} is timm's default", what);
    }
    STOKER_FAIL("model.pretrained {}: its config.json built timm's network with {}: {} (model_args), which computes "
                "otherwise: {}",
                source, key, value, why);
  }
}

}  // namespace stoker::models::weights
