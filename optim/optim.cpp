// The optimizers' registry's users: parameter groups, make_optimizer, state layout, learning rates and
// gradient clipping (optim/optim.h).
#include "optim/optim.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include <torch/torch.h>

#include "common/error.h"
#include "common/log.h"

namespace stoker {

int64_t ParamGroupSpec::numel() const {
  int64_t n = 0;
  for (const auto& p : params) n += p.numel();
  return n;
}

std::vector<ParamGroupSpec> plan_param_groups(const OptimizerOptions& o, const std::vector<ParamInfo>& params,
                                              int64_t num_layers, const std::vector<std::string>& layer_names) {
  const bool by_layer = o.layer_decay > 0;
  const bool head_apart = o.head_lr_scale != 1.0;
  std::vector<ParamGroupSpec> groups;
  std::map<std::tuple<int64_t, bool, bool>, size_t> index;  // (layer, decay, head) -> group
  for (const ParamInfo& p : params) {
    const bool decay = p.tensor.dim() > 1 || o.decay_norm_and_bias;
    const int64_t layer = by_layer ? p.layer : 0;
    const bool head = head_apart && p.head;
    const auto key = std::make_tuple(layer, decay, head);
    auto found = index.find(key);
    if (found == index.end()) {
      ParamGroupSpec g;
      g.weight_decay = decay ? o.weight_decay : 0.0;
      // timm: layer_decay^(layer_max - layer), the head (the last layer) at 1.
      const double layer_scale = by_layer ? std::pow(o.layer_decay, static_cast<double>(num_layers - 1 - layer)) : 1.0;
      g.lr_scale = layer_scale * (head ? o.head_lr_scale : 1.0);
      if (head) {
        g.label = "head";
      } else if (by_layer && layer < static_cast<int64_t>(layer_names.size())) {
        g.label = layer_names[static_cast<size_t>(layer)];
      }
      found = index.emplace(key, groups.size()).first;
      groups.push_back(std::move(g));
    }
    groups[found->second].params.push_back(p.tensor);
  }
  return groups;
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerOptions& o, const std::vector<ParamGroupSpec>& groups,
                                                        torch::Device device) {
  const OptimizerImpl impl = resolve_optimizer_impl(o.implementation, device);
  if (device.is_cuda() && impl != OptimizerImpl::kFused) {
    logger().warn("optimizer.implementation: {} on CUDA reads the loss scaler's inf/NaN flag on the host at every "
                  "step under fp16-mixed (a device synchronisation) and cannot be captured in a CUDA graph; "
                  "fused (the default on CUDA) does neither",
                  o.implementation);
  }
  STOKER_CHECK(!groups.empty(), "the model has no trainable parameters");
  std::unique_ptr<torch::optim::Optimizer> optimizer =
      optimizer_registry().get(o.algorithm.type()).create(o, o.algorithm.options(), groups, impl);
  std::vector<double> scales;
  for (const auto& g : groups) scales.push_back(g.lr_scale);
  const bool scaled = std::any_of(scales.begin(), scales.end(), [](double s) { return s != 1.0; });
  STOKER_CHECK(optimizer->param_groups().size() == groups.size(),
               "optimizer.type {} made {} parameter groups where {} were asked for; its registered create must make "
               "one per ParamGroupSpec, in order (optim/optim.h)",
               o.algorithm.type(), optimizer->param_groups().size(), groups.size());
  if (auto* amp = dynamic_cast<AmpStepOptimizer*>(optimizer.get())) {
    amp->set_lr_scales(std::move(scales));
    amp->set_lr(o.lr);
  } else {
    STOKER_CHECK(!scaled, "optimizer.type {} keeps one learning rate for all parameter groups, so it cannot take "
                 "optimizer.layer_decay or optimizer.head_lr_scale; use sgd, adamw or lamb",
                 o.algorithm.type());
  }
  return optimizer;
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerOptions& o, torch::nn::Module& model,
                                                        torch::Device device) {
  STOKER_CHECK(o.layer_decay == 0 && o.head_lr_scale == 1.0,
               "optimizer.layer_decay and optimizer.head_lr_scale need the model's layers and head: build the "
               "optimizer with stoker::make_parts (recipe/parts.h) or from plan_param_groups");
  std::vector<ParamInfo> params;
  for (const auto& p : model.named_parameters()) {
    if (p.value().requires_grad()) params.push_back({p.key(), p.value()});
  }
  return make_optimizer(o, plan_param_groups(o, params, 1), device);
}

void match_state_layout(torch::optim::Optimizer& optimizer) {
  torch::NoGradGuard no_grad;
  const auto match = [](const torch::Tensor& param, torch::Tensor state) {
    if (!state.defined() || state.sizes() != param.sizes() || state.strides() == param.strides()) return;
    state.set_data(state.contiguous(param.suggest_memory_format()));
  };
  auto& states = optimizer.state();
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      const auto found = states.find(p.unsafeGetTensorImpl());
      if (found == states.end() || !found->second) continue;
      if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(found->second.get())) match(p, sgd->momentum_buffer());
      if (auto* adamw = dynamic_cast<torch::optim::AdamWParamState*>(found->second.get())) {
        match(p, adamw->exp_avg());
        match(p, adamw->exp_avg_sq());
        match(p, adamw->max_exp_avg_sq());
      }
    }
  }
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  if (auto* amp = dynamic_cast<AmpStepOptimizer*>(&optimizer)) {
    amp->set_lr(lr);
    return;
  }
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm,
                             const std::function<void(torch::Tensor&)>& sum_over_ranks) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (grads.empty() && !sum_over_ranks) return torch::zeros({}, torch::kFloat32);
  torch::Tensor total;
  if (grads.empty()) {
    total = torch::zeros({}, torch::kFloat32);
  } else {
    std::vector<torch::Tensor> norms = at::_foreach_norm(grads, 2);
    for (auto& n : norms) n = n.to(torch::kFloat32);
    total = at::linalg_vector_norm(torch::stack(norms), 2);
  }
  if (sum_over_ranks) {
    torch::Tensor squared = total * total;
    sum_over_ranks(squared);
    total = squared.sqrt();
  }
  if (grads.empty()) return total;
  const torch::Tensor coef = (max_norm / (total + 1e-6)).clamp_max(1.0);
  // Group by dtype: _foreach_mul_ with a tensor scalar needs one dtype per call.
  std::map<torch::ScalarType, std::vector<torch::Tensor>> by_dtype;
  for (const auto& g : grads) by_dtype[g.scalar_type()].push_back(g);
  for (auto& [dtype, list] : by_dtype) at::_foreach_mul_(list, coef.to(dtype));
  return total;
}

}  // namespace stoker
