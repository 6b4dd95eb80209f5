// The optimizer's parameter groups of a run (recipe/param_groups.h).
#include "recipe/param_groups.h"

#include <algorithm>

#include <fmt/format.h>

#include "models/layer_groups.h"
#include "models/registry.h"
#include "models/weights/key_pattern.h"
#include "trainer/freeze.h"

namespace stoker {

RunParameters run_parameters(const Config& config, torch::nn::Module& model) {
  const models::ModelType type = models::model_registry().get(config.model.type());
  std::vector<std::string> names;
  std::vector<torch::Tensor> tensors;
  for (const auto& p : model.named_parameters()) {
    names.push_back(p.key());
    tensors.push_back(p.value());
  }
  if (config.freeze.enabled()) frozen_parameter_names(model, config.freeze.patterns);  // the patterns' check
  const models::LayerAssignment layers = models::assign_layers(names, type.layer_groups);
  RunParameters out;
  std::vector<ParamInfo> params;
  for (size_t i = 0; i < names.size(); ++i) {
    const bool frozen = config.freeze.enabled() && models::weights::key_matches_any(config.freeze.patterns, names[i]);
    out.frozen += frozen ? 1 : 0;
    // Frozen for good: out of the optimizer. Frozen until an epoch: in its group, without a gradient.
    if (frozen && config.freeze.until_epoch == 0) {
      ++out.left_out;
      continue;
    }
    if (!frozen && !tensors[i].requires_grad()) continue;  // the model's own constants
    params.push_back({names[i], tensors[i], layers.layer[i], models::weights::key_matches_any(type.head_keys, names[i])});
  }
  out.groups = plan_param_groups(config.optimizer, params, layers.num_layers, layers.layer_names);
  return out;
}

std::string describe_parameters(const Config& config, torch::nn::Module& model, double lr) {
  const RunParameters p = run_parameters(config, model);
  int64_t tensors = 0, numel = 0;
  const ParamGroupSpec* lowest = nullptr;
  const ParamGroupSpec* highest = nullptr;
  for (const ParamGroupSpec& g : p.groups) {
    tensors += static_cast<int64_t>(g.params.size());
    numel += g.numel();
    if (lowest == nullptr || g.lr_scale < lowest->lr_scale) lowest = &g;
    if (highest == nullptr || g.lr_scale > highest->lr_scale) highest = &g;
  }
  std::string line = fmt::format("optimizer: {} tensors ({:.3g}M parameters) in {} group{}", tensors, numel / 1e6,
                                 p.groups.size(), p.groups.size() == 1 ? "" : "s");
  const auto named = [](const ParamGroupSpec* g) { return g->label.empty() ? std::string() : " (" + g->label + ")"; };
  if (lowest != nullptr && lowest->lr_scale != highest->lr_scale) {
    line += fmt::format(", lr {:.3g}{} .. {:.3g}{}", lr * lowest->lr_scale, named(lowest), lr * highest->lr_scale,
                        named(highest));
  } else {
    line += fmt::format(", lr {:.3g}", lr);
  }
  if (p.frozen > 0) {
    line += config.freeze.until_epoch > 0
                ? fmt::format("; {} frozen until epoch {}", p.frozen, config.freeze.until_epoch + 1)
                : fmt::format("; {} frozen (model.freeze)", p.frozen);
  }
  return line;
}

}  // namespace stoker
