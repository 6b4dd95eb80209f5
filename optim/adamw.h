// stoker::AdamW: torch::optim::AdamW (same options, state and checkpoint format) whose step runs on
// ATen's multi-tensor kernels (optim/optim.h says which), adamw's own keys, and the Adam moments that
// AdamW and LAMB (optim/lamb.h) keep alike. PyTorch's semantics: bias correction, decoupled weight decay.
#pragma once

#include <optional>
#include <unordered_map>
#include <vector>

#include <torch/optim/adamw.h>

#include "common/options.h"
#include "optim/amp_step.h"

namespace stoker {

// The Adam moments of `p` in an optimizer's state map (`state_`), made on first use as zeros in p's
// layout: AdamW's and LAMB's state, so that both save and load the same checkpoint entries.
torch::optim::AdamWParamState& adam_moments(
    ska::flat_hash_map<void*, std::unique_ptr<torch::optim::OptimizerParamState>>& state, const torch::Tensor& p);
// Sets p's moments (exp_avg, exp_avg_sq) and step count in such a state map (ShardableOptimizer).
void set_adam_state(ska::flat_hash_map<void*, std::unique_ptr<torch::optim::OptimizerParamState>>& state,
                    const torch::Tensor& p, const std::vector<torch::Tensor>& tensors, int64_t steps);

class AdamW : public MultiTensorOptimizer<torch::optim::AdamW, torch::optim::AdamWOptions> {
 public:
  using MultiTensorOptimizer::MultiTensorOptimizer;  // (groups, AdamWOptions defaults, OptimizerImpl)
  void create_state() override;
  // The step counts live in device tensors while training; these keep the checkpointed
  // AdamWParamState::step of each parameter in agreement with them.
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
  std::vector<torch::Tensor> param_state(const torch::Tensor& p) override;
  int64_t param_steps(const torch::Tensor& p) override;
  void set_param_state(const torch::Tensor& p, const std::vector<torch::Tensor>& state, int64_t steps) override;

 private:
  void check_group(const torch::optim::AdamWOptions& o) const override;  // no amsgrad
  void step_group(size_t g, const torch::optim::AdamWOptions& o, GroupTensors& t, const MaybeTensor& grad_scale,
                  const MaybeTensor& found_inf) override;
  // Each parameter's steps taken (skipped ones excluded), float32 [1] on its device, as PyTorch keeps
  // them: a parameter that first gets a gradient late is bias-corrected for its own steps.
  std::unordered_map<c10::TensorImpl*, torch::Tensor> steps_;
  // The foreach path's step counts on the host (its bias corrections are host scalars): reading the
  // device counts would synchronise with the device once per parameter and step.
  std::unordered_map<c10::TensorImpl*, int64_t> host_steps_;
  // The moments and step counts of `params`, made on first use.
  void state_of(const std::vector<torch::Tensor>& params, std::vector<torch::Tensor>& exp_avgs,
                std::vector<torch::Tensor>& exp_avg_sqs, std::vector<torch::Tensor>& steps);
};

// adamw's own keys (optimizer.betas, optimizer.eps).
struct AdamWKeys : TypeOptionsOf<AdamWKeys> {
  std::vector<double> betas{0.9, 0.999};
  double eps = 1e-8;
  void visit(OptionsVisitor& v) override;
};

}  // namespace stoker
