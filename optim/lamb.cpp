#include "optim/lamb.h"

#include <algorithm>
#include <iterator>
#include <cmath>

#include <torch/torch.h>

#include "common/log.h"

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
  torch::Device device = shards_ ? shards_->device : torch::Device(torch::kCPU);  // a rank may hold no piece
  for (const auto& group : param_groups()) {
    for (const auto& p : group.params()) {
      device = p.device();
      if (p.grad().defined()) grads.push_back(p.grad());
    }
  }
  if (grads.empty() && !shards_) return scale;
  torch::Tensor total = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
  if (!grads.empty()) total = at::linalg_vector_norm(torch::stack(at::_foreach_norm(grads, 2)).to(torch::kFloat32), 2);
  if (shards_) {  // the norm of all the gradients: every rank's pieces
    torch::Tensor squared = total * total;
    shards_->sum_over_ranks(squared);
    total = squared.sqrt();
  }
  if (scale.defined()) total = total / scale;  // the norm of the true gradients
  torch::Tensor clip = (total / max_grad_norm_).clamp_min(1.0);
  return scale.defined() ? clip * scale : clip;
}

std::string Lamb::capture_obstacle() const {
  return "optimizer.type lamb keeps each parameter's step count on the host and cannot be captured; use sgd or "
         "adamw (with optimizer.implementation: fused or auto) for train.cuda_graph, or set train.cuda_graph: false";
}

std::vector<torch::Tensor> Lamb::updates_of(const std::vector<torch::Tensor>& params, std::vector<torch::Tensor> grads,
                                            const torch::optim::AdamWOptions& o) {
  const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
  std::vector<torch::Tensor> exp_avgs, exp_avg_sqs;
  std::vector<c10::Scalar> correction1, correction2_sqrt;  // per parameter: its own step count
  for (const auto& p : params) {
    auto& s = state_for(p);
    s.step(s.step() + 1);
    const auto n = static_cast<double>(s.step());
    exp_avgs.push_back(s.exp_avg());
    exp_avg_sqs.push_back(s.exp_avg_sq());
    correction1.emplace_back(1.0 - std::pow(beta1, n));
    correction2_sqrt.emplace_back(std::sqrt(1.0 - std::pow(beta2, n)));
  }
  at::_foreach_lerp_(exp_avgs, grads, 1.0 - beta1);
  at::_foreach_mul_(exp_avg_sqs, beta2);
  at::_foreach_addcmul_(exp_avg_sqs, grads, grads, 1.0 - beta2);
  grads.clear();
  std::vector<torch::Tensor> denom = at::_foreach_sqrt(exp_avg_sqs);
  at::_foreach_div_(denom, correction2_sqrt);
  at::_foreach_add_(denom, o.eps());
  std::vector<torch::Tensor> update = at::_foreach_div(exp_avgs, correction1);
  at::_foreach_div_(update, denom);
  if (o.weight_decay() != 0) at::_foreach_add_(update, params, o.weight_decay());
  return update;
}

void Lamb::apply(const std::vector<torch::Tensor>& params, std::vector<torch::Tensor> update,
                 const torch::Tensor& w_norm, const torch::Tensor& u_norm, bool adapt, double lr) const {
  if (adapt) {
    const torch::Tensor one = torch::ones_like(w_norm);
    torch::Tensor ratio = torch::where(w_norm > 0, torch::where(u_norm > 0, w_norm / u_norm, one), one);
    if (trust_clip_) ratio = ratio.clamp_max(1.0);
    at::_foreach_mul_(update, ratio.unbind(0));
  }
  at::_foreach_add_(params, update, -lr);
}

void Lamb::step_group(const std::vector<torch::Tensor>& params, std::vector<torch::Tensor> grads,
                      const torch::optim::AdamWOptions& o) {
  std::vector<torch::Tensor> update = updates_of(params, std::move(grads), o);
  if (!adapts(o)) return apply(params, std::move(update), {}, {}, false, o.lr());
  // The trust ratio |p| / |update| of every parameter at once (1 where either norm is 0).
  const torch::Tensor w_norm = torch::stack(at::_foreach_norm(params, 2));
  const torch::Tensor u_norm = torch::stack(at::_foreach_norm(update, 2));
  apply(params, std::move(update), w_norm, u_norm, true, o.lr());
}

void Lamb::sharded_step(const std::vector<Group>& groups) {
  struct Pending {
    const Group* group;
    std::vector<torch::Tensor> update;
    torch::Tensor whole;  // each piece's parameter index
  };
  std::vector<Pending> pending;
  const torch::Device device = shards_->device;  // also a rank without pieces sums on it (NCCL: CUDA only)
  for (const Group& g : groups) {
    std::vector<int64_t> whole;
    for (const auto& p : g.params) whole.push_back(shards_->whole.at(p.unsafeGetTensorImpl()));
    // The indices on the device, copied once (a copy from pageable host memory waits for the device).
    auto known = std::find_if(whole_indices_.begin(), whole_indices_.end(), [&](const auto& w) { return w.first == whole; });
    if (known == whole_indices_.end()) {
      if (whole_indices_.size() >= 64) whole_indices_.clear();  // groups whose gradients come and go: bounded
      whole_indices_.emplace_back(whole, torch::tensor(whole, torch::TensorOptions().dtype(torch::kInt64)).to(device));
      known = std::prev(whole_indices_.end());
    }
    pending.push_back({&g, updates_of(g.params, g.grads, *g.options), known->second});
  }
  // Squared norms of each whole parameter and of its update, summed over the pieces of every rank.
  torch::Tensor squares = torch::zeros({2, shards_->parameters}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
  for (const Pending& k : pending) {
    if (!adapts(*k.group->options)) continue;
    squares[0].index_add_(0, k.whole, torch::stack(at::_foreach_norm(k.group->params, 2)).to(torch::kFloat32).square());
    squares[1].index_add_(0, k.whole, torch::stack(at::_foreach_norm(k.update, 2)).to(torch::kFloat32).square());
  }
  shards_->sum_over_ranks(squares);
  const torch::Tensor norms = squares.sqrt();
  for (Pending& k : pending) {
    const bool adapt = adapts(*k.group->options);
    apply(k.group->params, std::move(k.update), adapt ? norms[0].index_select(0, k.whole) : torch::Tensor(),
          adapt ? norms[1].index_select(0, k.whole) : torch::Tensor(), adapt, k.group->options->lr());
  }
}

void Lamb::step_amp(const std::optional<torch::Tensor>& grad_scale, const std::optional<torch::Tensor>& found_inf) {
  torch::NoGradGuard no_grad;
  if (found_inf) {
    if (found_inf->is_cuda() && !warned_host_read_) {
      warned_host_read_ = true;
      logger().warn("optimizer.type lamb under fp16-mixed reads the loss scaler's inf/NaN flag on the host before "
                    "every step, which waits for the GPU each step; bf16-mixed needs no loss scaling and has no "
                    "such wait");
    }
    if (found_inf->item<float>() != 0.0f) return;  // a skipped fp16 step changes nothing
  }
  const torch::Tensor divisor = gradient_divisor(grad_scale);
  std::vector<Group> groups;
  for (auto& group : param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    TORCH_CHECK(!o.amsgrad(), "stoker::Lamb does not support amsgrad");
    Group g{{}, {}, &o};
    for (const auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      g.params.push_back(p);
      g.grads.push_back(p.grad());
    }
    if (g.params.empty()) continue;
    if (divisor.defined()) {
      const bool one_dtype = std::all_of(g.grads.begin(), g.grads.end(), [&](const torch::Tensor& t) {
        return t.scalar_type() == g.grads[0].scalar_type();
      });
      if (one_dtype) {
        g.grads = at::_foreach_div(g.grads, divisor.to(g.grads[0].scalar_type()));
      } else {
        for (auto& t : g.grads) t = t / divisor.to(t.scalar_type());
      }
    }
    groups.push_back(std::move(g));
  }
  if (shards_) return sharded_step(groups);
  for (Group& g : groups) step_group(g.params, std::move(g.grads), *g.options);
}

}  // namespace stoker
