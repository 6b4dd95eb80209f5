// What Stoker's optimizers (optim/sgd.h, adamw.h, lamb.h) have beyond libtorch's: which kernels a
// step runs on (OptimizerImpl), and AmpStepOptimizer, the step that takes the loss scaler's tensors on
// the device and a learning rate that a captured CUDA graph follows; then the pieces their steps share
// and MultiTensorOptimizer, the step SGD and AdamW share around their own kernels.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/optim/optimizer.h>
#include <torch/types.h>
#include <torch/utils.h>

#include "optim/sharding.h"

namespace stoker {

enum class OptimizerImpl { kFused, kForeach, kReference };

// "auto" (fused on CUDA, foreach on the CPU) | "fused" | "foreach" | "reference".
OptimizerImpl resolve_optimizer_impl(const std::string& name, torch::Device device);

// Implemented by Stoker's optimizers: a step that takes the loss scaler's tensors on the device and
// a learning rate that can change without breaking a captured CUDA graph.
class AmpStepOptimizer {
 public:
  virtual ~AmpStepOptimizer() = default;
  // grad_scale: the gradients are still multiplied by it (the step divides them);
  // found_inf: a float [1] tensor; when it is nonzero the step changes nothing.
  virtual void step_amp(const std::optional<torch::Tensor>& grad_scale,
                        const std::optional<torch::Tensor>& found_inf) = 0;
  // Sets the learning rate of every parameter group to lr x the group's scale (on the device too, for
  // the fused kernels).
  virtual void set_lr(double lr) = 0;
  // Each parameter group's learning-rate scale (optimizer.layer_decay, optimizer.head_lr_scale), one
  // per group in order; empty: 1 for all. make_optimizer sets them.
  void set_lr_scales(std::vector<double> scales) { lr_scales_ = std::move(scales); }
  double lr_scale(size_t group) const { return group < lr_scales_.size() ? lr_scales_[group] : 1.0; }
  // Whether a step can be captured in a CUDA graph (the fused kernels: no host synchronisation).
  virtual bool capturable() const = 0;
  // Why not, as the end of "train.cuda_graph: training eagerly because ..." ("" when it can).
  virtual std::string capture_obstacle() const {
    return capturable() ? "" : "it needs optimizer.implementation: fused (or auto)";
  }
  // Makes the state of every parameter now (momentum buffers, moments, step counts), as a step would
  // on first use. Before a CUDA graph capture: state first made inside a capture would be a node of
  // the graph, re-zeroed at every replay.
  virtual void create_state() = 0;

 protected:
  std::vector<double> lr_scales_;
};

// ---- what the steps of Stoker's optimizers share (optim/sgd.cpp, adamw.cpp) ---------------------

struct GroupTensors {
  std::vector<torch::Tensor> params, grads;
};

// The parameters of a group that have a gradient, with their gradients.
GroupTensors with_grads(const torch::optim::OptimizerParamGroup& group);

// Whether the step must be skipped, read on the host (foreach/reference paths).
bool host_found_inf(const std::optional<torch::Tensor>& found_inf);

// Gradients divided by grad_scale, as new tensors (foreach path: the parameters' .grad is left as is).
std::vector<torch::Tensor> unscaled(const std::vector<torch::Tensor>& grads,
                                    const std::optional<torch::Tensor>& grad_scale);

// Each group's learning rate: lr x its scale, on the host and (fused, CUDA) in its device tensor.
void set_group_lrs(torch::optim::Optimizer& optimizer, const AmpStepOptimizer& scales,
                   std::vector<torch::Tensor>& device_lrs, double lr);

// Each group's learning rate as a float32 tensor on the parameters' device, for the fused kernels on
// CUDA (a captured CUDA graph reads them there); none otherwise.
std::vector<torch::Tensor> device_lrs(const std::vector<torch::optim::OptimizerParamGroup>& groups,
                                      OptimizerImpl impl);

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

// libtorch's optimizer `Torch` (options `Options`) with Stoker's step: the reference path, the skip of
// a non-finite step on the host (foreach), and for each group with gradients its own kernels
// (step_group); the learning rate per group on the device (fused, CUDA). SGD and AdamW are one each.
template <typename Torch, typename Options>
class MultiTensorOptimizer : public Torch, public AmpStepOptimizer, public ShardableOptimizer {
 public:
  MultiTensorOptimizer(std::vector<torch::optim::OptimizerParamGroup> groups, Options defaults, OptimizerImpl impl)
      : Torch(std::move(groups), std::move(defaults)), impl_(impl), lrs_(device_lrs(this->param_groups(), impl)) {}

  torch::Tensor step(torch::optim::Optimizer::LossClosure closure = nullptr) override {
    return closure_step<Torch>(*this, impl_, std::move(closure));
  }
  void step_amp(const std::optional<torch::Tensor>& grad_scale,
                const std::optional<torch::Tensor>& found_inf) override {
    torch::NoGradGuard no_grad;
    if (impl_ == OptimizerImpl::kReference) return reference_step<Torch>(*this, grad_scale, found_inf);
    if (impl_ == OptimizerImpl::kForeach && host_found_inf(found_inf)) return;
    for (size_t g = 0; g < this->param_groups().size(); ++g) {
      auto& group = this->param_groups()[g];
      const auto& o = static_cast<const Options&>(group.options());
      check_group(o);
      GroupTensors t = with_grads(group);
      if (!t.params.empty()) step_group(g, o, t, grad_scale, found_inf);
    }
  }
  void set_lr(double lr) override { set_group_lrs(*this, *this, lrs_, lr); }
  bool capturable() const override { return impl_ == OptimizerImpl::kFused; }

 protected:
  using MaybeTensor = std::optional<torch::Tensor>;
  // Refuses the options the kernels do not implement (SGD's dampening, AdamW's amsgrad).
  virtual void check_group(const Options& o) const = 0;
  // Group `g`'s step on its parameters that have a gradient: fused (lr: lrs_[g] where there is one)
  // or foreach.
  virtual void step_group(size_t g, const Options& o, GroupTensors& t, const MaybeTensor& grad_scale,
                          const MaybeTensor& found_inf) = 0;

  OptimizerImpl impl_;
  std::vector<torch::Tensor> lrs_;  // each group's learning rate on the parameters' device (fused, CUDA)
};

}  // namespace stoker
