// stoker::AdamW (optim/adamw.h).
#include "optim/adamw.h"

#include <torch/torch.h>

#include "common/error.h"

namespace stoker {

void AdamW::create_state() {
  for (auto& group : param_groups()) {
    std::vector<torch::Tensor> exp_avgs, exp_avg_sqs, steps;
    state_of(group.params(), exp_avgs, exp_avg_sqs, steps);
  }
}

void AdamW::check_group(const torch::optim::AdamWOptions& o) const {
  TORCH_CHECK(!o.amsgrad(), "stoker::AdamW does not support amsgrad");
}

void AdamW::step_group(size_t g, const torch::optim::AdamWOptions& o, GroupTensors& t, const MaybeTensor& grad_scale,
                       const MaybeTensor& found_inf) {
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
    return;
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

void AdamWKeys::visit(OptionsVisitor& v) {
  v.field("betas", betas, rules::items(rules::unit_open(), 2, 2));
  v.field("eps", eps, rules::positive());
}

}  // namespace stoker
