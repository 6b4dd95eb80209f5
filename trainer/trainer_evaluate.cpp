// The Trainer's evaluation (trainer/trainer.h): the BatchNorm statistics made the same on every rank
// first (the strategy: distributed.eval_bn), each rank's shard of the evaluation data, the sums over the ranks.
#include "trainer/trainer.h"

#include <torch/torch.h>

#include "common/error.h"
#include "trainer/evaluate.h"

namespace stoker {

EvalResult Trainer::evaluate() {
  STOKER_CHECK(eval_ != nullptr, "Trainer::evaluate: this Trainer has no evaluation source; hand one to its "
               "constructor (or make_trainer) to evaluate");
  strategy_->before_evaluation(module());  // data parallel: the same BatchNorm statistics on every rank
  module().eval();
  EvalResult result = evaluate_model([this](const torch::Tensor& x) { return forward(x); }, *eval_);
  eval_->take_times();  // evaluation's data times are not the training epoch's
  train_mode();  // and the callbacks that keep parts in eval mode (trainer/freeze.h)
  // All ranks' shards: the sample-weighted means of the ranks' results (alone: this one's as it is).
  std::vector<double> means = {result.loss, result.top1, result.top5};
  std::vector<double> counts = {static_cast<double>(result.samples), static_cast<double>(result.excluded)};
  strategy_->weighted_means(means, counts);
  result.loss = means[0];
  result.top1 = means[1];
  result.top5 = means[2];
  result.samples = static_cast<int64_t>(counts[0]);
  result.excluded = static_cast<int64_t>(counts[1]);
  return result;
}

EvalResult Trainer::evaluate_ema() {
  STOKER_CHECK(ema_ != nullptr, "evaluate_ema() needs an EMA of the weights; set train.ema_decay");
  EmaWeightsInModel swap(*ema_, module());
  return evaluate();
}

}  // namespace stoker
