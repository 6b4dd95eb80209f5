// The data-parallel strategies' shared answers (parallel/over_ranks.h).
#include "parallel/over_ranks.h"

#include <algorithm>

#include <torch/torch.h>

#include "common/log.h"
#include "parallel/sync_batchnorm.h"

namespace stoker::parallel {

void OverRanks::reduce_decision(torch::Tensor& flags) {
  parallel_->all_reduce({flags}, distributed::ReduceOp::kMax);
}

torch::Tensor OverRanks::mean(const torch::Tensor& t) {
  torch::NoGradGuard no_grad;
  torch::Tensor all = t.detach().clone();
  parallel_->all_reduce({all}, distributed::ReduceOp::kSum);
  return all.div_(static_cast<double>(world_size()));
}

bool OverRanks::decision_due(int64_t step) const {
  return step % std::max<int64_t>(1, context_.stop_check_every) == 0;
}

void OverRanks::before_evaluation(torch::nn::Module& model) {
  if (context_.eval_bn_reduce) {
    average_batchnorm_statistics(model, *parallel_);  // distributed.eval_bn: reduce
    return;
  }
  // Rank 0's buffers (BatchNorm's running statistics) everywhere, as DDP's broadcast_buffers.
  std::vector<torch::Tensor> buffers = model.buffers();
  parallel_->broadcast(buffers);
}

void OverRanks::attach_sync_batchnorm(torch::nn::Module& model) {
  if (!context_.sync_batchnorm) return;
  const int64_t n = convert_sync_batchnorm(model, context_.group->collectives());
  logger().info("distributed.sync_batchnorm: {} batch norm(s) normalise over the batches of all {} ranks", n,
                world_size());
}

}  // namespace stoker::parallel
