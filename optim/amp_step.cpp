// optim/amp_step.h.
#include "optim/amp_step.h"

#include <torch/torch.h>

#include "common/error.h"

namespace stoker {
namespace {

// The device of the first parameter (the CPU for none).
torch::Device device_of(const std::vector<torch::optim::OptimizerParamGroup>& groups) {
  for (const auto& g : groups) {
    if (!g.params().empty()) return g.params().front().device();
  }
  return torch::kCPU;
}

}  // namespace

OptimizerImpl resolve_optimizer_impl(const std::string& name, torch::Device device) {
  if (name == "auto") return device.is_cuda() ? OptimizerImpl::kFused : OptimizerImpl::kForeach;
  if (name == "fused") return OptimizerImpl::kFused;
  if (name == "foreach") return OptimizerImpl::kForeach;
  if (name == "reference") return OptimizerImpl::kReference;
  STOKER_FAIL("optimizer.implementation '{}' is not known; use auto, fused, foreach or reference", name);
}

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

}  // namespace stoker
