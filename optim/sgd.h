// stoker::SGD: torch::optim::SGD (same options, state and checkpoint format) whose step runs on
// ATen's multi-tensor kernels (optim/optim.h says which), and sgd's own keys. PyTorch's semantics:
// momentum, dampening 0, optional Nesterov, L2 weight decay added to the gradient.
#pragma once

#include <optional>
#include <vector>

#include <torch/optim/sgd.h>

#include "common/options.h"
#include "optim/amp_step.h"
#include "optim/sharding.h"

namespace stoker {

class SGD : public torch::optim::SGD, public AmpStepOptimizer, public ShardableOptimizer {
 public:
  SGD(std::vector<torch::optim::OptimizerParamGroup> groups, torch::optim::SGDOptions defaults,
      OptimizerImpl impl);
  torch::Tensor step(LossClosure closure = nullptr) override;
  void step_amp(const std::optional<torch::Tensor>& grad_scale,
                const std::optional<torch::Tensor>& found_inf) override;
  void set_lr(double lr) override;
  void create_state() override;
  bool capturable() const override { return impl_ == OptimizerImpl::kFused; }
  std::vector<torch::Tensor> param_state(const torch::Tensor& p) override;
  int64_t param_steps(const torch::Tensor&) override { return 0; }
  void set_param_state(const torch::Tensor& p, const std::vector<torch::Tensor>& state, int64_t steps) override;

 private:
  // The momentum buffer of `p`, made (zero) on first use, as PyTorch does.
  torch::Tensor momentum_of(const torch::Tensor& p);
  OptimizerImpl impl_;
  std::vector<torch::Tensor> lrs_;  // each group's learning rate on the parameters' device (fused, CUDA)
};

// sgd's own keys (optimizer.momentum, optimizer.nesterov).
struct SgdKeys : TypeOptionsOf<SgdKeys> {
  double momentum = 0.9;
  bool nesterov = true;
  void visit(OptionsVisitor& v) override;
  void check() const override;
};

}  // namespace stoker
