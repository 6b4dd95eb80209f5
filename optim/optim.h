// The optimizers' registry and how a run's optimizer is built: the common keys (OptimizerOptions),
// the parameter groups (weight decay, layer-wise learning rates, the head), make_optimizer, and
// gradient clipping, without host synchronisation. One header per optimizer, each on ATen's
// multi-tensor kernels instead of one small kernel per parameter and operation:
//   optim/sgd.h    stoker::SGD      torch::optim::SGD's options, state and checkpoint format
//   optim/adamw.h  stoker::AdamW    torch::optim::AdamW's
//   optim/lamb.h   stoker::Lamb     timm's Lamb, its state AdamW's
// Their kernels (optim/amp_step.h, OptimizerImpl):
//   fused    `_fused_sgd_` / `_fused_adamw_`: one kernel over all parameters (CUDA and CPU). The
//            learning rate lives in a device tensor on CUDA, so a captured CUDA graph follows the
//            schedule; the loss scaler's S and inf flag go straight into the kernel.
//   foreach  `_foreach_*` ops (a few kernels over all parameters); the default on the CPU.
// `optimizer.implementation: reference` gives libtorch's own per-parameter optimizers instead (the
// reference path of the equivalence tests).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "common/options.h"
#include "common/registry.h"
#include "optim/adamw.h"
#include "optim/amp_step.h"
#include "optim/sgd.h"

namespace stoker {

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
