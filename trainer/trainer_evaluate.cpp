// The Trainer's evaluation (trainer/trainer.h): the BatchNorm statistics made the same on every rank
// first (distributed.eval_bn), each rank's shard of the evaluation data, the sums over the ranks.
#include "trainer/trainer.h"

#include <torch/torch.h>

#include "common/error.h"
#include "trainer/evaluate.h"
#include "trainer/sync_batchnorm.h"

namespace stoker {
namespace {

// The evaluation of all ranks' shards from each rank's: sample-weighted means of the sums.
EvalResult sum_over_ranks(distributed::DataParallel& dp, const EvalResult& mine) {
  const auto n = static_cast<double>(mine.samples);
  std::vector<double> sums = {mine.loss * n, mine.top1 * n, mine.top5 * n, n};
  dp.sum(sums);
  EvalResult all;
  all.samples = static_cast<int64_t>(sums[3]);
  if (all.samples == 0) return all;
  all.loss = sums[0] / sums[3];
  all.top1 = sums[1] / sums[3];
  all.top5 = sums[2] / sums[3];
  return all;
}

}  // namespace

EvalResult Trainer::evaluate() {
  STOKER_CHECK(eval_ != nullptr, "Trainer::evaluate: this Trainer has no evaluation source; hand one to its "
               "constructor (or make_trainer) to evaluate");
  if (data_parallel_ && options_.eval_bn == EvalBatchNorm::kReduce) {
    average_batchnorm_statistics(module(), *data_parallel_);  // distributed.eval_bn: reduce
  } else if (data_parallel_) {
    // Rank 0's buffers (BatchNorm's running statistics) everywhere, as DDP's broadcast_buffers.
    std::vector<torch::Tensor> buffers = module().buffers();
    data_parallel_->broadcast(buffers);
  }
  module().eval();
  EvalResult result = evaluate_model([this](const torch::Tensor& x) { return forward(x); }, *eval_);
  eval_->take_times();  // evaluation's data times are not the training epoch's
  train_mode();  // and the callbacks that keep parts in eval mode (trainer/freeze.h)
  if (data_parallel_) result = sum_over_ranks(*data_parallel_, result);
  return result;
}

EvalResult Trainer::evaluate_ema() {
  STOKER_CHECK(ema_ != nullptr, "evaluate_ema() needs an EMA of the weights; set train.ema_decay");
  EmaWeightsInModel swap(*ema_, module());
  return evaluate();
}

}  // namespace stoker
