// stoker::SGD (optim/sgd.h).
#include "optim/sgd.h"

#include <torch/torch.h>

#include "common/error.h"

namespace stoker {

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

void SGD::check_group(const torch::optim::SGDOptions& o) const {
  TORCH_CHECK(o.dampening() == 0, "stoker::SGD supports dampening 0 only");
}

void SGD::step_group(size_t g, const torch::optim::SGDOptions& o, GroupTensors& t, const MaybeTensor& grad_scale,
                     const MaybeTensor& found_inf) {
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
    return;
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

void SgdKeys::visit(OptionsVisitor& v) {
  v.field("momentum", momentum, rules::unit_open());
  v.field("nesterov", nesterov);
}

void SgdKeys::check() const {
  if (nesterov && momentum == 0) STOKER_FAIL("nesterov needs momentum > 0; set a momentum or nesterov: false");
}

}  // namespace stoker
