#include "optim/optim.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include <torch/torch.h>

#include "common/error.h"
#include "common/log.h"

namespace stoker {
namespace {

struct GroupTensors {
  std::vector<torch::Tensor> params, grads;
};

// The parameters of a group that have a gradient, with their gradients.
GroupTensors with_grads(const torch::optim::OptimizerParamGroup& group) {
  GroupTensors t;
  for (const auto& p : group.params()) {
    if (!p.grad().defined()) continue;
    t.params.push_back(p);
    t.grads.push_back(p.grad());
  }
  return t;
}

torch::Device device_of(const std::vector<torch::optim::OptimizerParamGroup>& groups) {
  for (const auto& g : groups) {
    if (!g.params().empty()) return g.params().front().device();
  }
  return torch::kCPU;
}

// Whether the step must be skipped, read on the host (foreach/reference paths).
bool host_found_inf(const std::optional<torch::Tensor>& found_inf) {
  return found_inf && found_inf->item<float>() != 0.0f;
}

// Gradients divided by grad_scale, as new tensors (foreach path: the parameters' .grad is left as is).
std::vector<torch::Tensor> unscaled(const std::vector<torch::Tensor>& grads,
                                    const std::optional<torch::Tensor>& grad_scale) {
  if (!grad_scale) return grads;
  return at::_foreach_div(grads, grad_scale->reshape({}).to(grads.front().scalar_type()));
}

// The reference path under the loss scaler: skip on the host, divide the gradients by the scale,
// then libtorch's own step.
template <typename Base>
void reference_step(Base& optimizer, const std::optional<torch::Tensor>& grad_scale,
                    const std::optional<torch::Tensor>& found_inf) {
  if (host_found_inf(found_inf)) return;
  if (grad_scale) {
    for (auto& group : optimizer.param_groups()) {
      for (auto& p : group.params()) {
        if (p.grad().defined()) p.grad().div_(*grad_scale);
      }
    }
  }
  optimizer.Base::step();
}

// step(closure) of Stoker's optimizers: the closure (if any), then a step without loss scaling.
template <typename Base, typename Derived>
torch::Tensor closure_step(Derived& optimizer, OptimizerImpl impl,
                           torch::optim::Optimizer::LossClosure closure) {
  if (impl == OptimizerImpl::kReference) return optimizer.Base::step(std::move(closure));
  torch::Tensor loss;
  if (closure) {
    torch::AutoGradMode enable(true);
    loss = closure();
  }
  optimizer.step_amp(std::nullopt, std::nullopt);
  return loss;
}

// Each group's learning rate: lr x its scale, on the host and (fused, CUDA) in its device tensor.
void set_group_lrs(torch::optim::Optimizer& optimizer, const AmpStepOptimizer& scales,
                   std::vector<torch::Tensor>& device_lrs, double lr) {
  auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    const double group_lr = lr * scales.lr_scale(g);
    groups[g].options().set_lr(group_lr);
    if (g < device_lrs.size() && device_lrs[g].defined()) device_lrs[g].fill_(group_lr);
  }
}

// Each group's learning rate as a float32 tensor on the parameters' device, for the fused kernels on
// CUDA (a captured CUDA graph reads them there); none otherwise.
std::vector<torch::Tensor> device_lrs(const std::vector<torch::optim::OptimizerParamGroup>& groups,
                                      OptimizerImpl impl) {
  const torch::Device device = device_of(groups);
  if (impl != OptimizerImpl::kFused || !device.is_cuda()) return {};
  std::vector<torch::Tensor> out;
  for (const auto& g : groups) {
    out.push_back(torch::full({}, g.options().get_lr(), torch::TensorOptions().device(device).dtype(torch::kFloat32)));
  }
  return out;
}

}  // namespace

OptimizerImpl resolve_optimizer_impl(const std::string& name, torch::Device device) {
  if (name == "auto") return device.is_cuda() ? OptimizerImpl::kFused : OptimizerImpl::kForeach;
  if (name == "fused") return OptimizerImpl::kFused;
  if (name == "foreach") return OptimizerImpl::kForeach;
  if (name == "reference") return OptimizerImpl::kReference;
  STOKER_FAIL("optimizer.implementation '{}' is not known; use auto, fused, foreach or reference", name);
}

// ---- SGD ----------------------------------------------------------------------------------------

SGD::SGD(std::vector<torch::optim::OptimizerParamGroup> groups, torch::optim::SGDOptions defaults,
         OptimizerImpl impl)
    : torch::optim::SGD(groups, defaults), impl_(impl), lrs_(device_lrs(param_groups(), impl)) {}

void SGD::set_lr(double lr) { set_group_lrs(*this, *this, lrs_, lr); }

torch::Tensor SGD::momentum_of(const torch::Tensor& p) {
  auto& slot = state_[p.unsafeGetTensorImpl()];
  if (!slot) {
    auto s = std::make_unique<torch::optim::SGDParamState>();
    s->momentum_buffer(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    slot = std::move(s);
  }
  return static_cast<torch::optim::SGDParamState&>(*slot).momentum_buffer();
}

void SGD::create_state() {
  for (auto& group : param_groups()) {
    if (static_cast<const torch::optim::SGDOptions&>(group.options()).momentum() == 0) continue;
    for (const auto& p : group.params()) momentum_of(p);
  }
}

std::vector<torch::Tensor> SGD::param_state(const torch::Tensor& p) {
  for (const auto& group : param_groups()) {
    for (const auto& q : group.params()) {
      if (!q.is_same(p)) continue;
      if (static_cast<const torch::optim::SGDOptions&>(group.options()).momentum() == 0) return {};
      return {momentum_of(p)};
    }
  }
  TORCH_CHECK(false, "SGD::param_state: not a parameter of this optimizer");
  return {};
}

void SGD::set_param_state(const torch::Tensor& p, const std::vector<torch::Tensor>& state, int64_t /*steps*/) {
  if (state.empty()) return;
  torch::NoGradGuard no_grad;
  momentum_of(p).copy_(state.at(0));
}

torch::Tensor SGD::step(LossClosure closure) {
  return closure_step<torch::optim::SGD>(*this, impl_, std::move(closure));
}

void SGD::step_amp(const std::optional<torch::Tensor>& grad_scale,
                   const std::optional<torch::Tensor>& found_inf) {
  torch::NoGradGuard no_grad;
  if (impl_ == OptimizerImpl::kReference) return reference_step<torch::optim::SGD>(*this, grad_scale, found_inf);
  if (impl_ == OptimizerImpl::kForeach && host_found_inf(found_inf)) return;
  for (size_t g = 0; g < param_groups().size(); ++g) {
    auto& group = param_groups()[g];
    const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
    TORCH_CHECK(o.dampening() == 0, "stoker::SGD supports dampening 0 only");
    GroupTensors t = with_grads(group);
    if (t.params.empty()) continue;
    // Momentum buffers start at zero: with dampening 0 the first step then gives buf = grad,
    // exactly as PyTorch's first-step initialisation does.
    std::vector<torch::Tensor> bufs;
    if (o.momentum() != 0) {
      for (const auto& p : t.params) bufs.push_back(momentum_of(p));
    }
    if (impl_ == OptimizerImpl::kFused) {
      if (g < lrs_.size()) {
        at::_fused_sgd_(t.params, t.grads, bufs, o.weight_decay(), o.momentum(), lrs_[g], 0.0, o.nesterov(),
                        /*maximize=*/false, /*is_first_step=*/false, grad_scale, found_inf);
      } else {
        at::_fused_sgd_(t.params, t.grads, bufs, o.weight_decay(), o.momentum(), o.lr(), 0.0,
                        o.nesterov(), /*maximize=*/false, /*is_first_step=*/false, grad_scale, found_inf);
      }
      continue;
    }
    // foreach
    std::vector<torch::Tensor> grads = unscaled(t.grads, grad_scale);
    if (o.weight_decay() != 0) grads = at::_foreach_add(grads, t.params, o.weight_decay());
    std::vector<torch::Tensor> direction = grads;
    if (o.momentum() != 0) {
      at::_foreach_mul_(bufs, o.momentum());
      at::_foreach_add_(bufs, grads);
      direction = o.nesterov() ? at::_foreach_add(grads, bufs, o.momentum()) : bufs;
    }
    at::_foreach_add_(t.params, direction, -o.lr());
  }
}

// ---- AdamW --------------------------------------------------------------------------------------

AdamW::AdamW(std::vector<torch::optim::OptimizerParamGroup> groups, torch::optim::AdamWOptions defaults,
             OptimizerImpl impl)
    : torch::optim::AdamW(groups, defaults),
      impl_(impl),
      lrs_(device_lrs(param_groups(), impl)) {}

void AdamW::set_lr(double lr) { set_group_lrs(*this, *this, lrs_, lr); }

void AdamW::create_state() {
  for (auto& group : param_groups()) {
    std::vector<torch::Tensor> exp_avgs, exp_avg_sqs, steps;
    state_of(group.params(), exp_avgs, exp_avg_sqs, steps);
  }
}

torch::Tensor AdamW::step(LossClosure closure) {
  return closure_step<torch::optim::AdamW>(*this, impl_, std::move(closure));
}

void AdamW::step_amp(const std::optional<torch::Tensor>& grad_scale,
                     const std::optional<torch::Tensor>& found_inf) {
  torch::NoGradGuard no_grad;
  if (impl_ == OptimizerImpl::kReference) return reference_step<torch::optim::AdamW>(*this, grad_scale, found_inf);
  if (impl_ == OptimizerImpl::kForeach && host_found_inf(found_inf)) return;
  for (size_t g = 0; g < param_groups().size(); ++g) {
    auto& group = param_groups()[g];
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    TORCH_CHECK(!o.amsgrad(), "stoker::AdamW does not support amsgrad");
    GroupTensors t = with_grads(group);
    if (t.params.empty()) continue;
    std::vector<torch::Tensor> exp_avgs, exp_avg_sqs, steps;
    state_of(t.params, exp_avgs, exp_avg_sqs, steps);
    at::_foreach_add_(steps, 1.0);  // only the parameters that have a gradient step
    const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
    if (impl_ == OptimizerImpl::kFused) {
      if (g < lrs_.size()) {
        at::_fused_adamw_(t.params, t.grads, exp_avgs, exp_avg_sqs, {}, steps, lrs_[g], beta1, beta2,
                          o.weight_decay(), o.eps(), /*amsgrad=*/false, /*maximize=*/false, grad_scale,
                          found_inf);
      } else {
        at::_fused_adamw_(t.params, t.grads, exp_avgs, exp_avg_sqs, {}, steps, o.lr(), beta1, beta2,
                          o.weight_decay(), o.eps(), /*amsgrad=*/false, /*maximize=*/false, grad_scale,
                          found_inf);
      }
      if (found_inf) at::_foreach_add_(steps, found_inf->reshape({}), -1.0);  // a skipped step takes it back
      continue;
    }
    // foreach: the step counts kept on the host too (a skipped fp16 step returned above, on the host)
    std::vector<at::Scalar> bias2_sqrt, step_size;
    for (const auto& p : t.params) {
      const auto n = static_cast<double>(++host_steps_[p.unsafeGetTensorImpl()]);
      bias2_sqrt.emplace_back(std::sqrt(1.0 - std::pow(beta2, n)));
      step_size.emplace_back(-o.lr() / (1.0 - std::pow(beta1, n)));
    }
    std::vector<torch::Tensor> grads = unscaled(t.grads, grad_scale);
    if (o.weight_decay() != 0) at::_foreach_mul_(t.params, 1.0 - o.lr() * o.weight_decay());
    at::_foreach_lerp_(exp_avgs, grads, 1.0 - beta1);
    at::_foreach_mul_(exp_avg_sqs, beta2);
    at::_foreach_addcmul_(exp_avg_sqs, grads, grads, 1.0 - beta2);
    std::vector<torch::Tensor> denom = at::_foreach_sqrt(exp_avg_sqs);
    at::_foreach_div_(denom, bias2_sqrt);
    at::_foreach_add_(denom, o.eps());
    at::_foreach_addcdiv_(t.params, exp_avgs, denom, step_size);
  }
}

torch::optim::AdamWParamState& adam_moments(
    ska::flat_hash_map<void*, std::unique_ptr<torch::optim::OptimizerParamState>>& state, const torch::Tensor& p) {
  auto& slot = state[p.unsafeGetTensorImpl()];
  if (!slot) {
    auto s = std::make_unique<torch::optim::AdamWParamState>();
    s->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    s->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    slot = std::move(s);
  }
  return static_cast<torch::optim::AdamWParamState&>(*slot);
}

void set_adam_state(ska::flat_hash_map<void*, std::unique_ptr<torch::optim::OptimizerParamState>>& state,
                    const torch::Tensor& p, const std::vector<torch::Tensor>& tensors, int64_t steps) {
  TORCH_CHECK(tensors.size() == 2, "set_adam_state: expected exp_avg and exp_avg_sq");
  torch::NoGradGuard no_grad;
  auto& s = adam_moments(state, p);
  s.exp_avg().copy_(tensors[0]);
  s.exp_avg_sq().copy_(tensors[1]);
  s.step(steps);
}

void AdamW::state_of(const std::vector<torch::Tensor>& params, std::vector<torch::Tensor>& exp_avgs,
                     std::vector<torch::Tensor>& exp_avg_sqs, std::vector<torch::Tensor>& steps) {
  for (const auto& p : params) {
    auto& s = adam_moments(state_, p);
    exp_avgs.push_back(s.exp_avg());
    exp_avg_sqs.push_back(s.exp_avg_sq());
    torch::Tensor& step = steps_[p.unsafeGetTensorImpl()];
    if (!step.defined()) {
      step = torch::full({1}, static_cast<double>(s.step()), torch::TensorOptions().device(p.device()).dtype(torch::kFloat32));
      host_steps_[p.unsafeGetTensorImpl()] = s.step();
    }
    steps.push_back(step);
  }
}

std::vector<torch::Tensor> AdamW::param_state(const torch::Tensor& p) {
  auto& s = adam_moments(state_, p);
  return {s.exp_avg(), s.exp_avg_sq()};
}

int64_t AdamW::param_steps(const torch::Tensor& p) {
  const auto found = steps_.find(p.unsafeGetTensorImpl());
  if (found != steps_.end()) return static_cast<int64_t>(std::llround(found->second.item<double>()));
  return adam_moments(state_, p).step();
}

void AdamW::set_param_state(const torch::Tensor& p, const std::vector<torch::Tensor>& state, int64_t steps) {
  set_adam_state(state_, p, state, steps);
  steps_.erase(p.unsafeGetTensorImpl());  // made again from the state's step at p's next step
  host_steps_.erase(p.unsafeGetTensorImpl());
}

void AdamW::save(torch::serialize::OutputArchive& archive) const {
  if (impl_ != OptimizerImpl::kReference) {
    for (const auto& [key, state] : state_) {
      const auto found = steps_.find(static_cast<c10::TensorImpl*>(key));
      if (found == steps_.end()) continue;
      const auto step = static_cast<int64_t>(std::llround(found->second.item<double>()));
      static_cast<torch::optim::AdamWParamState&>(*state).step(step);
    }
  }
  torch::optim::AdamW::save(archive);
}

void AdamW::load(torch::serialize::InputArchive& archive) {
  torch::optim::AdamW::load(archive);
  steps_.clear();  // made again from each parameter's loaded AdamWParamState::step at its next step
  host_steps_.clear();
}

// ---- building -----------------------------------------------------------------------------------

void SgdKeys::visit(OptionsVisitor& v) {
  v.field("momentum", momentum, rules::unit_open());
  v.field("nesterov", nesterov);
}

void SgdKeys::check() const {
  if (nesterov && momentum == 0) STOKER_FAIL("nesterov needs momentum > 0; set a momentum or nesterov: false");
}

void AdamWKeys::visit(OptionsVisitor& v) {
  v.field("betas", betas, rules::items(rules::unit_open(), 2, 2));
  v.field("eps", eps, rules::positive());
}

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
