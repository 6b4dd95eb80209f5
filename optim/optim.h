// The optimizers the Trainer uses, and gradient clipping, without host synchronisation.
//
// stoker::SGD and stoker::AdamW are torch::optim::SGD / AdamW (same options, same state, same
// checkpoint format) whose step runs on ATen's multi-tensor kernels instead of one small kernel
// per parameter and operation:
//   fused    `_fused_sgd_` / `_fused_adamw_`: one kernel over all parameters (CUDA and CPU). The
//            learning rate lives in a device tensor on CUDA, so a captured CUDA graph follows the
//            schedule; the loss scaler's S and inf flag go straight into the kernel.
//   foreach  `_foreach_*` ops (a few kernels over all parameters); the default on the CPU.
// `optimizer.implementation: reference` gives libtorch's own per-parameter optimizers instead (the
// reference path of the equivalence tests).
//
// Semantics are PyTorch's: SGD with momentum, dampening 0, optional Nesterov and L2 weight decay
// added to the gradient; AdamW with bias correction and decoupled weight decay.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "common/options.h"
#include "common/registry.h"


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
  // Sets the learning rate of every parameter group (on the device too, for the fused kernels).
  virtual void set_lr(double lr) = 0;
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
};

class SGD : public torch::optim::SGD, public AmpStepOptimizer {
 public:
  SGD(std::vector<torch::optim::OptimizerParamGroup> groups, torch::optim::SGDOptions defaults,
      OptimizerImpl impl);
  torch::Tensor step(LossClosure closure = nullptr) override;
  void step_amp(const std::optional<torch::Tensor>& grad_scale,
                const std::optional<torch::Tensor>& found_inf) override;
  void set_lr(double lr) override;
  void create_state() override;
  bool capturable() const override { return impl_ == OptimizerImpl::kFused; }

 private:
  // The momentum buffer of `p`, made (zero) on first use, as PyTorch does.
  torch::Tensor momentum_of(const torch::Tensor& p);
  OptimizerImpl impl_;
  torch::Tensor lr_;  // the learning rate on the parameters' device (fused, CUDA)
};

// The Adam moments of `p` in an optimizer's state map (`state_`), made on first use as zeros in p's
// layout: AdamW's and LAMB's state, so that both save and load the same checkpoint entries.
torch::optim::AdamWParamState& adam_moments(
    ska::flat_hash_map<void*, std::unique_ptr<torch::optim::OptimizerParamState>>& state, const torch::Tensor& p);

class AdamW : public torch::optim::AdamW, public AmpStepOptimizer {
 public:
  AdamW(std::vector<torch::optim::OptimizerParamGroup> groups, torch::optim::AdamWOptions defaults,
        OptimizerImpl impl);
  torch::Tensor step(LossClosure closure = nullptr) override;
  void step_amp(const std::optional<torch::Tensor>& grad_scale,
                const std::optional<torch::Tensor>& found_inf) override;
  void set_lr(double lr) override;
  void create_state() override;
  bool capturable() const override { return impl_ == OptimizerImpl::kFused; }
  // The step counts live in device tensors while training; these keep the checkpointed
  // AdamWParamState::step of each parameter in agreement with them.
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

 private:
  OptimizerImpl impl_;
  torch::Tensor lr_;
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

// sgd's own keys (optimizer.momentum, optimizer.nesterov).
struct SgdKeys : TypeOptionsOf<SgdKeys> {
  double momentum = 0.9;
  bool nesterov = true;
  void visit(OptionsVisitor& v) override;
  void check() const override;
};

// adamw's own keys (optimizer.betas, optimizer.eps).
struct AdamWKeys : TypeOptionsOf<AdamWKeys> {
  std::vector<double> betas{0.9, 0.999};
  double eps = 1e-8;
  void visit(OptionsVisitor& v) override;
};

struct OptimizerOptions {
  // optimizer.type (sgd | adamw | lamb, or registered) and that type's own keys beside it.
  TypedOptions algorithm{"sgd", std::make_unique<SgdKeys>()};
  double lr = 0.1;
  double weight_decay = 5e-4;
  bool decay_norm_and_bias = false;  // apply weight decay to 1-D parameters (norms, biases) too
  // auto (fused kernels on CUDA, foreach on the CPU) | fused | foreach | reference (libtorch's own)
  std::string implementation = "auto";
  // Linear scaling: the learning rate used is lr * global batch / lr_reference_batch, the global
  // batch being the samples per optimizer step over all processes; 0 = use lr as it is (see recipe/config.h).
  int64_t lr_reference_batch = 0;
};

// How an optimizer's learning rate follows the batch size when only the batch changes (`trainer
// doctor --batch` rescales by it): linearly (SGD: Goyal et al., 2017), by the square root (the Adam
// family and LAMB: Hoffer et al., 2017; You et al., 2020), or not known (the user checks it).
enum class LrScaling { kNone, kLinear, kSqrt };
// "linear", "square-root", "none".
const char* lr_scaling_name(LrScaling scaling);

// A registered optimizer type: its own keys, how to build it over parameter groups (`decay` and
// `no_decay` are the parameters with and without weight decay: see make_optimizer), and its
// learning-rate scaling rule.
struct OptimizerType {
  OptionsMaker options;
  std::function<std::unique_ptr<torch::optim::Optimizer>(const OptimizerOptions& common, const TypeOptions& own,
                                                         const std::vector<torch::Tensor>& decay,
                                                         const std::vector<torch::Tensor>& no_decay, OptimizerImpl impl)>
      create;
  LrScaling lr_scaling = LrScaling::kNone;
};
// sgd and adamw; applications may register more.
Registry<OptimizerType>& optimizer_registry();

// Builds the configured optimizer over `model`'s trainable parameters, with weight decay off for
// 1-D parameters (norm weights, biases) unless optimizer.decay_norm_and_bias is set.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerOptions& options,
                                                        torch::nn::Module& model,
                                                        torch::Device device = torch::kCPU);

// Sets the learning rate of every parameter group of any optimizer.
// Gives each parameter's optimizer state (SGD's momentum, AdamW's moments) the memory layout of
// its parameter: a checkpoint written with train.channels_last toggled loads the state in its old
// strides, which the fused kernels refuse (they need equal strides) and the foreach ones run slowly.
void match_state_layout(torch::optim::Optimizer& optimizer);

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

// Scales the gradients of `params` in place so that their global L2 norm is at most `max_norm`.
// Returns the norm before clipping as a float32 device tensor; nothing waits for the host.
torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm);

}  // namespace stoker
