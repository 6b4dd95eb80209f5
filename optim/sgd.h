// stoker::SGD: torch::optim::SGD (same options, state and checkpoint format) whose step runs on
// ATen's multi-tensor kernels (optim/optim.h says which), and sgd's own keys. PyTorch's semantics:
// momentum, dampening 0, optional Nesterov, L2 weight decay added to the gradient.
#pragma once

#include <optional>
#include <vector>

#include <torch/optim/sgd.h>

#include "common/options.h"
#include "optim/amp_step.h"

namespace stoker {

class SGD : public MultiTensorOptimizer<torch::optim::SGD, torch::optim::SGDOptions> {
 public:
  using MultiTensorOptimizer::MultiTensorOptimizer;  // (groups, SGDOptions defaults, OptimizerImpl)
  void create_state() override;
  std::vector<torch::Tensor> param_state(const torch::Tensor& p) override;
  int64_t param_steps(const torch::Tensor&) override { return 0; }
  void set_param_state(const torch::Tensor& p, const std::vector<torch::Tensor>& state, int64_t steps) override;

 private:
  void check_group(const torch::optim::SGDOptions& o) const override;  // dampening 0 only
  void step_group(size_t g, const torch::optim::SGDOptions& o, GroupTensors& t, const MaybeTensor& grad_scale,
                  const MaybeTensor& found_inf) override;
  // The momentum buffer of `p`, made (zero) on first use, as PyTorch does.
  torch::Tensor momentum_of(const torch::Tensor& p);
};

// sgd's own keys (optimizer.momentum, optimizer.nesterov).
struct SgdKeys : TypeOptionsOf<SgdKeys> {
  double momentum = 0.9;
  bool nesterov = true;
  void visit(OptionsVisitor& v) override;
  void check() const override;
};

}  // namespace stoker
