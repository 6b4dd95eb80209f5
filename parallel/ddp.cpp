// distributed.strategy: ddp (parallel/strategy.h): plain data parallelism, as PyTorch's
// DistributedDataParallel. Rank 0's weights and buffers are broadcast at set-up; c10d's Reducer
// all-reduces the gradients (their mean over the ranks) in buckets while backward runs, on the last
// micro-batch of each optimizer step only (DDP's no_sync for the others); every rank then takes the
// same optimizer step. The reductions, decisions and evaluation's BatchNorm statistics are
// parallel/over_ranks.h's.
#include "parallel/over_ranks.h"

namespace stoker::parallel {
namespace {

class Ddp final : public OverRanks {
 public:
  using OverRanks::OverRanks;
  std::string name() const override { return "ddp"; }

  void setup(const std::shared_ptr<torch::nn::Module>& model,
             std::unique_ptr<torch::optim::Optimizer>& /*optimizer*/) override {
    attach_sync_batchnorm(*model);
    parallel_ = context_.group->data_parallel(*model);
  }

  // Released parts (model.freeze) need their gradients synchronised too: a new Reducer over them.
  void parameters_changed(torch::nn::Module& model) override { parallel_ = context_.group->data_parallel(model); }
};

}  // namespace

std::shared_ptr<Strategy> make_ddp(const StrategyContext& context) { return std::make_shared<Ddp>(context); }

}  // namespace stoker::parallel
