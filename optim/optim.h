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

// The Adam moments of `p` in an optimizer's state map (`state_`), made on first use as zeros in p's
// layout: AdamW's and LAMB's state, so that both save and load the same checkpoint entries.
torch::optim::AdamWParamState& adam_moments(
    ska::flat_hash_map<void*, std::unique_ptr<torch::optim::OptimizerParamState>>& state, const torch::Tensor& p);
// Sets p's moments (exp_avg, exp_avg_sq) and step count in such a state map (ShardableOptimizer).
void set_adam_state(ska::flat_hash_map<void*, std::unique_ptr<torch::optim::OptimizerParamState>>& state,
                    const torch::Tensor& p, const std::vector<torch::Tensor>& tensors, int64_t steps);

class AdamW : public torch::optim::AdamW, public AmpStepOptimizer, public ShardableOptimizer {
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
  std::vector<torch::Tensor> param_state(const torch::Tensor& p) override;
  int64_t param_steps(const torch::Tensor& p) override;
  void set_param_state(const torch::Tensor& p, const std::vector<torch::Tensor>& state, int64_t steps) override;

 private:
  OptimizerImpl impl_;
  std::vector<torch::Tensor> lrs_;  // each group's learning rate on the parameters' device (fused, CUDA)
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
  // Layer-wise learning-rate decay (timm's param_groups_layer_decay, BEiT): the parameters of layer i
  // of n (the model type's layers: models/layer_groups.h, the head last) train at lr x
  // layer_decay^(n - 1 - i); 0 = off, e.g. 0.75 for fine-tuning.
  double layer_decay = 0.0;
  // The head's parameters (the model type's head keys) train at lr x head_lr_scale (on top of
  // layer_decay, whose scale for the head is 1): e.g. 10 for a new classifier on a pretrained backbone.
  double head_lr_scale = 1.0;
};

// One parameter group as an optimizer type builds it: its parameters, their weight decay, and the
// scale of the learning rate they train at (the schedule's lr x lr_scale).
struct ParamGroupSpec {
  std::vector<torch::Tensor> params;
  double weight_decay = 0.0;
  double lr_scale = 1.0;
  std::string label;  // which part of the model, for the log: "stem", "blocks", "head", or ""
  int64_t numel() const;
};

// A parameter as the grouping sees it: its name, its layer (models/layer_groups.h; 0 without
// layer_decay) and whether it is part of the head.
struct ParamInfo {
  std::string name;
  torch::Tensor tensor;
  int64_t layer = 0;
  bool head = false;
};

// The parameter groups of `params`: with optimizer.layer_decay, one per (layer, weight decay or not)
// as timm's param_groups_layer_decay makes them, scale layer_decay^(num_layers - 1 - layer); without,
// the parameters with and without weight decay; either way the head apart when head_lr_scale is not 1.
// Weight decay is off for 1-D parameters (norm weights, biases) unless optimizer.decay_norm_and_bias.
// Groups come in the order their first parameter does in `params` (stable across runs, which resuming
// a checkpoint needs); `layer_names` (by layer) label them.
std::vector<ParamGroupSpec> plan_param_groups(const OptimizerOptions& options, const std::vector<ParamInfo>& params,
                                              int64_t num_layers, const std::vector<std::string>& layer_names = {});

// How an optimizer's learning rate follows the batch size when only the batch changes (`trainer
// doctor --batch` rescales by it): linearly (SGD: Goyal et al., 2017), by the square root (the Adam
// family and LAMB: Hoffer et al., 2017; You et al., 2020), or not known (the user checks it).
enum class LrScaling { kNone, kLinear, kSqrt };

// A registered optimizer type: its own keys, how to build it over parameter groups, and its
// learning-rate scaling rule. `create` makes one libtorch parameter group per ParamGroupSpec, in
// order, with the spec's weight decay and learning rate common.lr x its lr_scale; make_optimizer then
// hands the scales to an AmpStepOptimizer, whose set_lr keeps them (an optimizer of another kind
// takes no scales other than 1).
struct OptimizerType {
  OptionsMaker options;
  std::function<std::unique_ptr<torch::optim::Optimizer>(const OptimizerOptions& common, const TypeOptions& own,
                                                         const std::vector<ParamGroupSpec>& groups, OptimizerImpl impl)>
      create;
  LrScaling lr_scaling = LrScaling::kNone;
  // Whether what `create` makes can be sharded (distributed.shard_optimizer): it implements
  // ShardableOptimizer (optim/sharding.h) and updates slices of parameters as it would whole ones.
  bool shardable = false;
};
// sgd and adamw; applications may register more.
Registry<OptimizerType>& optimizer_registry();

// Builds the configured optimizer over `model`'s trainable parameters, with weight decay off for
// 1-D parameters (norm weights, biases) unless optimizer.decay_norm_and_bias is set. Without the
// model's layers and head (recipe/parts.h make_parts knows them from the model type),
// optimizer.layer_decay and optimizer.head_lr_scale are refused.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerOptions& options,
                                                        torch::nn::Module& model,
                                                        torch::Device device = torch::kCPU);
// The configured optimizer over `groups` (plan_param_groups), each training at lr x its scale.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerOptions& options,
                                                        const std::vector<ParamGroupSpec>& groups,
                                                        torch::Device device = torch::kCPU);

// Gives each parameter's optimizer state (SGD's momentum, AdamW's moments) the memory layout of
// its parameter: a checkpoint written with train.channels_last toggled loads the state in its old
// strides, which the fused kernels refuse (they need equal strides) and the foreach ones run slowly.
void match_state_layout(torch::optim::Optimizer& optimizer);

// Sets the learning rate of every parameter group of any optimizer: lr x the group's scale for
// Stoker's (AmpStepOptimizer), lr for others.
void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

// Scales the gradients of `params` in place so that their global L2 norm is at most `max_norm`.
// Returns the norm before clipping as a float32 device tensor; nothing waits for the host.
// `sum_over_ranks` (ZeRO-1, where each rank holds a piece of the gradients): sums the squared norm
// over the ranks, in place, so that every rank clips by the norm of all of them.
torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm,
                             const std::function<void(torch::Tensor&)>& sum_over_ranks = nullptr);

}  // namespace stoker
