// What data parallelism asks of the training loop, behind one object the loop asks and never inspects
// (Lightning's strategies/strategy.py): setting up the model and the optimizer, what happens around
// backward (the gradient all-reduce, no_sync for accumulation), clipping and zeroing the gradients a
// rank steps, the reductions of metrics (sum, mean) and of decisions (the inf/NaN skip and the loss
// scaler's flag, stop requests, early stopping), the optimizer state a checkpoint holds, and the
// BatchNorm statistics before an evaluation.
//
// The strategies are registered types chosen by distributed.strategy (strategy_registry below): single
// (one process: every question answered with what this process has), ddp (parallel/ddp.cpp: c10d's
// Reducer, SyncBatchNorm optional) and zero1 (parallel/zero1.cpp: ZeRO-1's sharded optimizer state).
// A new scheme is one file defining its maker and one line in strategy.cpp's registry.
//
//   auto strategy = parallel::make_strategy("ddp", context);   // context.group: the joined ranks
//   TrainerParts parts; ... parts.strategy = strategy;           // the Trainer calls setup() first
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include "common/registry.h"
#include "distributed/process_group.h"
#include "optim/optim.h"

namespace stoker::parallel {

// What a strategy is made from: the ranks and the run's choices about them.
struct StrategyContext {
  std::shared_ptr<distributed::ProcessGroup> group;  // null: one process
  bool sync_batchnorm = false;  // distributed.sync_batchnorm: every BatchNorm over all ranks' batches
  bool eval_bn_reduce = false;  // distributed.eval_bn: reduce (the ranks' mean), else broadcast (rank 0's)
  // How often (in optimizer steps) the ranks agree on stop requests; each agreement is a small
  // all-reduce that waits for the step.
  int64_t stop_check_every = 1;
  // ZeRO-1 makes the optimizer again over this rank's pieces: the options and the parameter groups
  // (plan_param_groups; empty: the model's trainable parameters) the whole one was made with.
  OptimizerOptions optimizer;
  std::vector<ParamGroupSpec> groups;
  torch::Device device = torch::kCPU;
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;
  virtual int64_t rank() const { return 0; }
  virtual int64_t world_size() const { return 1; }

  // ---- set-up ---------------------------------------------------------------------------------------
  // Readies the model and its optimizer, once, before the first step (the Trainer's constructor):
  // ddp broadcasts rank 0's weights and arms the gradient all-reduce; zero1 replaces the optimizer by
  // the sharded one over this rank's pieces.
  virtual void setup(const std::shared_ptr<torch::nn::Module>& /*model*/,
                     std::unique_ptr<torch::optim::Optimizer>& /*optimizer*/) {}
  // The tensors whose gradients this rank clips, checks for inf/NaN and steps: the optimizer's
  // parameters that require gradients (zero1: this rank's pieces of them).
  virtual std::vector<torch::Tensor> stepped_parameters(torch::optim::Optimizer& optimizer);
  // After the trainable parameters changed (model.freeze released some): ddp synchronises the new set.
  virtual void parameters_changed(torch::nn::Module& /*model*/) {}
  // Why the training step cannot be captured as a CUDA graph under this strategy; empty when it can.
  virtual std::string graph_obstacle() const { return ""; }

  // ---- the step -------------------------------------------------------------------------------------
  // Around each backward: `sync` = this micro-batch ends an optimizer step (the gradients are reduced
  // over the ranks); false = an accumulation micro-step (they stay local: DDP's no_sync).
  virtual void before_backward(bool /*sync*/) {}
  virtual void after_backward(bool /*sync*/) {}
  // Clips the gradients of `params` (stepped_parameters) to the global L2 norm `max_norm`.
  virtual void clip_gradients(const std::vector<torch::Tensor>& params, double max_norm);
  // Clears the gradients after an optimizer step; `keep_tensors`: in place (a replayed CUDA graph's
  // static gradients), else as the optimizer's zero_grad does.
  virtual void zero_grad(torch::optim::Optimizer& optimizer, bool keep_tensors);

  // ---- reductions -------------------------------------------------------------------------------------
  // A decision every rank must take together (Lightning's reduce_boolean_decision), on the device and
  // without waiting: each element of `flags` becomes its maximum over the ranks, in place. The loop
  // passes the step's inf/NaN flags before deciding to skip it, so every rank skips the same steps and
  // leaves its loss scale alone at the same steps (issue 36, G31).
  virtual void reduce_decision(torch::Tensor& /*flags*/) {}
  // The mean over the ranks of a device tensor (a step's loss), as a new tensor; alone, `t` itself.
  virtual torch::Tensor mean(const torch::Tensor& t) { return t; }
  // Element-wise sums over the ranks, in place, of host numbers; alone, nothing changes.
  virtual void sum(std::vector<double>& /*values*/) {}
  // Sample-weighted means over the ranks: each of `means` becomes the mean weighted by counts[0] (a
  // rank's samples), and `counts` their sums (counts[0] the samples; more counts are summed alongside).
  // Alone nothing changes; with no samples anywhere the means are 0.
  void weighted_means(std::vector<double>& means, std::vector<double>& counts);
  // Whether any rank's flag is set, for each of `flags` (host booleans: stop requests, early stopping).
  std::vector<bool> any(const std::vector<bool>& flags);
  // Whether the ranks agree on stop requests after optimizer step `step` (StrategyContext::
  // stop_check_every); alone, at every step (nothing to agree on, nothing to wait for).
  virtual bool decision_due(int64_t /*step*/) const { return true; }

  // ---- evaluation -------------------------------------------------------------------------------------
  // Before an evaluation: the ranks' BatchNorm running statistics made the same (distributed.eval_bn).
  virtual void before_evaluation(torch::nn::Module& /*model*/) {}

  // ---- checkpoints and random generators --------------------------------------------------------------
  // Whether saving a checkpoint is collective (zero1: every rank sends its optimizer state to rank 0).
  virtual bool collective_checkpoint() const { return false; }
  // Before a checkpoint is written: this rank's part in gathering the optimizer state; returns whether
  // this rank writes the file (zero1: rank 0 alone; its save then holds every rank's state).
  virtual bool prepare_checkpoint(torch::optim::Optimizer& /*optimizer*/) { return true; }
  // After a checkpoint put rank 0's random generators on every rank: each rank but 0 draws its own
  // stream again (seeded from the restored one and its rank), so that the ranks' dropout and drop path
  // masks stay their own (rank_seed).
  void generators_restored();
};

// The seed of rank `rank`'s default random generators in a run seeded with `seed` (as timm's
// random_seed(seed, rank)): seed + rank. Dropout and drop path draw from them, so each rank draws its
// own masks; rank 0 (and one process) keeps run.seed's stream.
uint64_t rank_seed(uint64_t seed, int64_t rank);

// A registered strategy (distributed.strategy).
struct StrategyType {
  std::string description;  // one line, for listings
  // Whether it trains several ranks; `make` gets a context with a process group exactly when it does.
  bool data_parallel = true;
  std::function<std::shared_ptr<Strategy>(const StrategyContext&)> make;
};

// single, ddp, zero1 (and what applications register).
Registry<StrategyType>& strategy_registry();

// The strategy `name` over `context` (an unknown name lists the known ones; a data-parallel one
// without a process group, or single with one of several ranks, is an error saying what to set).
std::shared_ptr<Strategy> make_strategy(const std::string& name, const StrategyContext& context);

}  // namespace stoker::parallel
