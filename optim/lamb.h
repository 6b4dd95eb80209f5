// LAMB (You et al. 2020, "Large Batch Optimization for Deep Learning"), as timm 1.0's Lamb computes
// it, the optimizer of "ResNet strikes back" (optimizer.type: lamb):
//   g      = grad / max(1, |all gradients|_2 / max_grad_norm)     (global clipping; max_grad_norm 0: off)
//   m, v   = Adam's moments of g (beta1, beta2), bias-corrected by the parameter's step count n
//   update = m / (1 - beta1^n) / (sqrt(v / (1 - beta2^n)) + eps) + weight_decay * p
//   update *= |p|_2 / |update|_2   (the trust ratio; 1 where either norm is 0; at most 1 with
//                                   trust_clip) for parameters with weight decay, or all with always_adapt
//   p     -= lr * update
// The state is AdamW's (exp_avg, exp_avg_sq, step per parameter), saved in the same checkpoint format.
// One implementation for every optimizer.implementation: foreach ops over each parameter group (a
// dozen launches a group rather than about 15 kernels per parameter), with the step counts kept on
// the host, so a step cannot be captured in a CUDA graph. Under fp16-mixed the loss scaler's inf flag
// is read on the host before each step (a synchronisation: warned once); bf16-mixed has no scaler.
// Sharded (ZeRO-1, set_shards): the norms of the gradients, of each parameter and of its update are
// totalled over the pieces on every rank (two small sums over the ranks per step) before they are used.
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include <torch/optim/adamw.h>

#include "common/options.h"
#include "optim/optim.h"

namespace stoker {

// lamb's own keys (optimizer.betas, eps, max_grad_norm, trust_clip, always_adapt): timm's defaults.
struct LambKeys : TypeOptionsOf<LambKeys> {
  std::vector<double> betas{0.9, 0.999};
  double eps = 1e-6;
  double max_grad_norm = 1.0;  // 0 = no global clipping
  bool trust_clip = false;     // LAMBC: the trust ratio at most 1
  bool always_adapt = false;   // the trust ratio also for parameters without weight decay
  void visit(OptionsVisitor& v) override;
};

class Lamb : public torch::optim::AdamW, public AmpStepOptimizer, public ShardableOptimizer {
 public:
  Lamb(std::vector<torch::optim::OptimizerParamGroup> groups, torch::optim::AdamWOptions defaults,
       const LambKeys& keys);
  torch::Tensor step(LossClosure closure = nullptr) override;
  void step_amp(const std::optional<torch::Tensor>& grad_scale,
                const std::optional<torch::Tensor>& found_inf) override;
  void set_lr(double lr) override;
  void create_state() override;
  bool capturable() const override { return false; }
  std::vector<torch::Tensor> param_state(const torch::Tensor& p) override;
  int64_t param_steps(const torch::Tensor& p) override { return state_for(p).step(); }
  void set_param_state(const torch::Tensor& p, const std::vector<torch::Tensor>& state, int64_t steps) override;
  void set_shards(ParameterShards shards) override { shards_ = std::move(shards); }
  std::string capture_obstacle() const override;

 private:
  torch::optim::AdamWParamState& state_for(const torch::Tensor& p);
  // What every gradient is divided by: the loss scale times the global clipping factor (undefined: 1).
  torch::Tensor gradient_divisor(const std::optional<torch::Tensor>& grad_scale) const;
  // A group's parameters that have gradients, their gradients (divided by gradient_divisor) and options.
  struct Group {
    std::vector<torch::Tensor> params, grads;
    const torch::optim::AdamWOptions* options;
  };
  // The Adam directions plus weight decay of `params` (their moments and step counts advanced).
  std::vector<torch::Tensor> updates_of(const std::vector<torch::Tensor>& params, std::vector<torch::Tensor> grads,
                                        const torch::optim::AdamWOptions& o);
  // Whether a group's updates are scaled by the trust ratio.
  bool adapts(const torch::optim::AdamWOptions& o) const { return o.weight_decay() != 0 || always_adapt_; }
  // params -= lr * update (times the trust ratio |p| / |update| from the norms given, with `adapt`).
  void apply(const std::vector<torch::Tensor>& params, std::vector<torch::Tensor> update, const torch::Tensor& w_norm,
             const torch::Tensor& u_norm, bool adapt, double lr) const;
  // One step of the parameters of a group that have gradients.
  void step_group(const std::vector<torch::Tensor>& params, std::vector<torch::Tensor> grads,
                  const torch::optim::AdamWOptions& o);
  // set_shards: the trust ratios from the norms of whole parameters, totalled over every rank's pieces.
  void sharded_step(const std::vector<Group>& groups);
  double max_grad_norm_;
  bool trust_clip_, always_adapt_;
  bool warned_host_read_ = false;
  std::optional<ParameterShards> shards_;
  // sharded_step: each list of pieces' parameter indices, on the device (copied from the host once).
  std::vector<std::pair<std::vector<int64_t>, torch::Tensor>> whole_indices_;
};

}  // namespace stoker
