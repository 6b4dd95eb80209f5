// ZeRO-1 (distributed.shard_optimizer: true): each rank's optimizer updates only its pieces of the
// parameters (distributed::ShardedDataParallel, distributed/data_parallel.h), so it keeps optimizer
// state (SGD's momentum, AdamW's and LAMB's moments) for about 1/N of them.
//
// A step, as the Trainer takes it (trainer/trainer.cpp):
//   backward          each bucket's gradients reduce-scattered as backward fills it (overlapped, as
//                     DDP's all-reduce); each rank is left with the mean gradient of its pieces
//   unscale / clip    on the pieces; the global norm is the square root of the squared norms summed over
//                     the ranks (clip_grad_norm's sum_over_ranks)
//   step              the loss scaler's inf/NaN flag is the maximum over the ranks (every rank skips
//                     the same steps); the inner optimizer steps the pieces; then every rank's updated
//                     pieces are all-gathered into every rank's parameters (not overlapped: the next
//                     forward needs them all)
// Checkpoints hold the whole state, in the format the unsharded optimizer writes: save() gathers every
// rank's pieces on rank 0 (a collective: every rank calls it at once), load() cuts this rank's pieces
// out of the whole state, so a run resumes sharded on any number of ranks, or unsharded, and
// `trainer eval` / `export` read the checkpoint as any other.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "distributed/data_parallel.h"
#include "optim/optim.h"

namespace stoker::parallel {

class ShardedOptimizer : public torch::optim::Optimizer, public AmpStepOptimizer {
 public:
  using MakeWhole = std::function<std::unique_ptr<torch::optim::Optimizer>()>;
  // `inner`: the optimizer over `shards`' pieces (ShardableOptimizer); `make_whole`: one of the same kind
  // and parameter groups over the whole parameters, for checkpoints.
  ShardedOptimizer(std::shared_ptr<distributed::ShardedDataParallel> shards,
                   std::unique_ptr<torch::optim::Optimizer> inner, MakeWhole make_whole);

  torch::Tensor step(LossClosure closure = nullptr) override;
  void step_amp(const std::optional<torch::Tensor>& grad_scale, const std::optional<torch::Tensor>& found_inf) override;
  void set_lr(double lr) override;
  bool capturable() const override { return false; }
  void create_state() override;
  // Collective: rank 0 writes the whole state gathered from every rank; the other ranks write nothing.
  void save(torch::serialize::OutputArchive& archive) const override;
  // The whole state (of a sharded or unsharded run, on any number of ranks); this rank keeps its pieces.
  void load(torch::serialize::InputArchive& archive) override;

  // Zeroes the gradients in place (Optimizer::zero_grad would drop the pieces' gradient views).
  void zero_gradients() { shards_->zero_grad(); }
  // The tensors this rank updates (1-D pieces of the parameters; their grad() the reduced gradient).
  std::vector<torch::Tensor> pieces() const;
  distributed::ShardedDataParallel& shards() { return *shards_; }
  torch::optim::Optimizer& inner() { return *inner_; }

 private:
  std::shared_ptr<distributed::ShardedDataParallel> shards_;
  std::unique_ptr<torch::optim::Optimizer> inner_;
  ShardableOptimizer* shardable_;
  MakeWhole make_whole_;
};

// The configured optimizer (make_optimizer's options) over `groups` (plan_param_groups: layer-wise
// learning rates and the head's scale; empty: the model's trainable parameters as make_optimizer(options,
// model) groups them) sharded over `shards`, the ZeRO-1 data parallelism of `model`: each rank's pieces
// in their parameter's group. An optimizer type that cannot be sharded is an error naming the keys.
std::unique_ptr<ShardedOptimizer> make_sharded_optimizer(const OptimizerOptions& options,
                                                         std::shared_ptr<torch::nn::Module> model,
                                                         std::shared_ptr<distributed::ShardedDataParallel> shards,
                                                         torch::Device device,
                                                         std::vector<ParamGroupSpec> groups = {});

// The bytes of optimizer state an optimizer holds (its momentum buffers and moments; for a
// ShardedOptimizer this rank's).
int64_t optimizer_state_bytes(torch::optim::Optimizer& optimizer);

}  // namespace stoker::parallel
