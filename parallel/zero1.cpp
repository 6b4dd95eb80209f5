// distributed.strategy: zero1 (parallel/strategy.h; distributed.shard_optimizer: true says the same):
// data parallelism with the optimizer state sharded over the ranks (ZeRO-1). At set-up the trainable
// parameters move into flat buckets of which each rank owns 1/N (distributed::ShardedDataParallel) and
// the optimizer is made again over this rank's pieces (parallel/sharded_optimizer.h): gradients are
// reduce-scattered during backward, each rank clips, checks and steps its pieces (the global norm and
// the inf/NaN flags agreed over the ranks), and the updated pieces are all-gathered into every rank's
// parameters. A checkpoint is collective: rank 0 writes the optimizer state gathered from every rank.
#include <algorithm>

#include <torch/serialize/archive.h>

#include "common/error.h"
#include "common/log.h"
#include "parallel/over_ranks.h"
#include "parallel/sharded_optimizer.h"

namespace stoker::parallel {
namespace {

class Zero1 final : public OverRanks {
 public:
  using OverRanks::OverRanks;
  std::string name() const override { return "zero1"; }

  void setup(const std::shared_ptr<torch::nn::Module>& model,
             std::unique_ptr<torch::optim::Optimizer>& optimizer) override {
    attach_sync_batchnorm(*model);
    shards_ = context_.group->sharded_data_parallel(*model);
    parallel_ = shards_;
    auto sharded = make_sharded_optimizer(context_.optimizer, model, shards_, context_.device, context_.groups);
    sharded_ = sharded.get();
    optimizer = std::move(sharded);
    int64_t mine = 0, all = 0;
    for (const auto& piece : shards_->pieces()) mine += piece.tensor.numel();
    for (const auto& p : shards_->parameters()) all += p.numel();
    logger().info("distributed.strategy: zero1 (ZeRO-1) over {} ranks: this rank updates {} of the {} parameters "
                  "({:.1f}%) and keeps their optimizer state; gradients reduce-scattered during backward, parameters "
                  "all-gathered after each step",
                  world_size(), mine, all,
                  100.0 * static_cast<double>(mine) / static_cast<double>(std::max<int64_t>(1, all)));
  }

  // This rank clips and checks the gradients it steps with.
  std::vector<torch::Tensor> stepped_parameters(torch::optim::Optimizer& /*optimizer*/) override {
    return sharded_->pieces();
  }
  void parameters_changed(torch::nn::Module& /*model*/) override {
    STOKER_FAIL("distributed.strategy: zero1 shards the parameters that train when the run starts, and they "
                "changed (model.freeze); fine-tune with model.freeze under distributed.strategy: ddp");
  }
  // The global norm: the squared norms of every rank's pieces summed.
  void clip_gradients(const std::vector<torch::Tensor>& params, double max_norm) override {
    clip_grad_norm(params, max_norm,
                   [this](torch::Tensor& squared) { shards_->all_reduce({squared}, distributed::ReduceOp::kSum); });
  }
  // In place: the gradients are views into the buckets.
  void zero_grad(torch::optim::Optimizer& /*optimizer*/, bool /*keep_tensors*/) override { shards_->zero_grad(); }

  bool collective_checkpoint() const override { return true; }
  bool prepare_checkpoint(torch::optim::Optimizer& optimizer) override {
    if (rank() == 0) return true;
    // Rank 0 writes, the optimizer state gathered there from every rank's pieces, this one's too.
    torch::serialize::OutputArchive unused;
    optimizer.save(unused);
    return false;
  }

 private:
  std::shared_ptr<distributed::ShardedDataParallel> shards_;
  ShardedOptimizer* sharded_ = nullptr;
};

}  // namespace

std::shared_ptr<Strategy> make_zero1(const StrategyContext& context) { return std::make_shared<Zero1>(context); }

}  // namespace stoker::parallel
