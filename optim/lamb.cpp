#include "optim/lamb.h"

#include <cmath>

#include <torch/torch.h>

namespace stoker {

void LambKeys::visit(OptionsVisitor& v) {
  v.field("betas", betas, rules::items(rules::unit_open(), 2, 2));
  v.field("eps", eps, rules::positive());
  v.field("max_grad_norm", max_grad_norm, rules::non_negative());
  v.field("trust_clip", trust_clip);
  v.field("always_adapt", always_adapt);
}

Lamb::Lamb(std::vector<torch::optim::OptimizerParamGroup> groups, torch::optim::AdamWOptions defaults,
           const LambKeys& keys)
    : torch::optim::AdamW(std::move(groups), std::move(defaults)),
      max_grad_norm_(keys.max_grad_norm),
      trust_clip_(keys.trust_clip),
      always_adapt_(keys.always_adapt) {}

void Lamb::set_lr(double lr) {
  auto& groups = param_groups();
  for (size_t g = 0; g < groups.size(); ++g) groups[g].options().set_lr(lr * lr_scale(g));
}

torch::optim::AdamWParamState& Lamb::state_for(const torch::Tensor& p) {
  return adam_moments(state_, p);
}

void Lamb::create_state() {
  for (auto& group : param_groups()) {
    for (const auto& p : group.params()) state_for(p);
  }
}

torch::Tensor Lamb::step(LossClosure closure) {
  torch::Tensor loss;
  if (closure) {
    torch::AutoGradMode enable(true);
    loss = closure();
  }
  step_amp(std::nullopt, std::nullopt);
  return loss;
}

std::vector<torch::Tensor> Lamb::param_state(const torch::Tensor& p) {
  auto& s = state_for(p);
  return {s.exp_avg(), s.exp_avg_sq()};
}

void Lamb::set_param_state(const torch::Tensor& p, const std::vector<torch::Tensor>& state, int64_t steps) {
  set_adam_state(state_, p, state, steps);
}

torch::Tensor Lamb::gradient_divisor(const std::optional<torch::Tensor>& grad_scale) const {
  torch::Tensor scale = grad_scale ? grad_scale->reshape({}).to(torch::kFloat32) : torch::Tensor();
  if (max_grad_norm_ <= 0) return scale;
  std::vector<torch::Tensor> grads;
  torch::Device device = torch::kCPU;
  for (const auto& group : param_groups()) {
    for (const auto& p : group.params()) {
      device = p.device();
      if (p.grad().defined()) grads.push_back(p.grad());
    }
  }
  if (grads.empty() && !shards_) return scale;
  torch::Tensor total = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
  if (!grads.empty()) {
    std::vector<torch::Tensor> norms = at::_foreach_norm(grads, 2);
    for (auto& n : norms) n = n.to(torch::kFloat32);
    total = at::linalg_vector_norm(torch::stack(norms), 2);
  }
  if (shards_) {  // the norm of all the gradients: every rank's pieces
    torch::Tensor squared = total * total;
    shards_->sum_over_ranks(squared);
    total = squared.sqrt();
  }
  if (scale.defined()) total = total / scale;  // the norm of the true gradients
  torch::Tensor clip = (total / max_grad_norm_).clamp_min(1.0);
  return scale.defined() ? clip * scale : clip;
}

torch::Tensor Lamb::update_of(const torch::Tensor& p, const torch::Tensor& grad, const torch::optim::AdamWOptions& o) {
  auto& s = state_for(p);
  s.step(s.step() + 1);
  const auto n = static_cast<double>(s.step());
  const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
  torch::Tensor exp_avg = s.exp_avg(), exp_avg_sq = s.exp_avg_sq();
  exp_avg.lerp_(grad, 1.0 - beta1);
  exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1.0 - beta2);
  const torch::Tensor denom = (exp_avg_sq.sqrt() / std::sqrt(1.0 - std::pow(beta2, n))).add_(o.eps());
  torch::Tensor update = (exp_avg / (1.0 - std::pow(beta1, n))).div_(denom);
  if (o.weight_decay() != 0) update.add_(p, o.weight_decay());
  return update;
}

void Lamb::apply(const torch::Tensor& p, torch::Tensor update, const torch::Tensor& w_norm, const torch::Tensor& u_norm,
                 bool adapt, double lr) const {
  if (adapt) {
    const torch::Tensor one = torch::ones_like(w_norm);
    torch::Tensor ratio = torch::where(w_norm > 0, torch::where(u_norm > 0, w_norm / u_norm, one), one);
    if (trust_clip_) ratio = ratio.clamp_max(1.0);
    update.mul_(ratio);
  }
  p.add_(update, -lr);
}

void Lamb::step_amp(const std::optional<torch::Tensor>& grad_scale, const std::optional<torch::Tensor>& found_inf) {
  torch::NoGradGuard no_grad;
  if (found_inf && found_inf->item<float>() != 0.0f) return;  // a skipped fp16 step changes nothing
  const torch::Tensor divisor = gradient_divisor(grad_scale);
  if (shards_) return sharded_step(divisor);
  for (auto& group : param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    TORCH_CHECK(!o.amsgrad(), "stoker::Lamb does not support amsgrad");
    for (const auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      torch::Tensor update = update_of(p, divisor.defined() ? p.grad() / divisor.to(p.grad().scalar_type()) : p.grad(), o);
      const bool adapt = adapts(o);
      apply(p, update, adapt ? p.norm(2) : torch::Tensor(), adapt ? update.norm(2) : torch::Tensor(), adapt, o.lr());
    }
  }
}

void Lamb::sharded_step(const torch::Tensor& divisor) {
  struct Pending {
    torch::Tensor p, update;
    int64_t whole;
    bool adapt;
    double lr;
  };
  std::vector<Pending> pending;
  torch::Device device = torch::kCPU;
  for (auto& group : param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    TORCH_CHECK(!o.amsgrad(), "stoker::Lamb does not support amsgrad");
    for (const auto& p : group.params()) {
      device = p.device();
      if (!p.grad().defined()) continue;
      const torch::Tensor grad = divisor.defined() ? p.grad() / divisor.to(p.grad().scalar_type()) : p.grad();
      pending.push_back({p, update_of(p, grad, o), shards_->whole.at(p.unsafeGetTensorImpl()), adapts(o), o.lr()});
    }
  }
  // Squared norms of each whole parameter and of its update, summed over the pieces of every rank.
  torch::Tensor squares = torch::zeros({shards_->parameters, 2}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
  for (const Pending& k : pending) {
    if (!k.adapt) continue;
    squares[k.whole][0] += k.p.to(torch::kFloat32).square().sum();
    squares[k.whole][1] += k.update.to(torch::kFloat32).square().sum();
  }
  shards_->sum_over_ranks(squares);
  const torch::Tensor norms = squares.sqrt();
  for (const Pending& k : pending) {
    apply(k.p, k.update, k.adapt ? norms[k.whole][0] : torch::Tensor(), k.adapt ? norms[k.whole][1] : torch::Tensor(),
          k.adapt, k.lr);
  }
}

}  // namespace stoker
