// Evaluation metrics: what an evaluation and an epoch report (EvalResult, EpochResult), counting
// top-k hits, a model's loss, top-1 and top-5 over a batch source, and the epoch metrics by name (the best checkpoint's and early stopping's: checkpoint.best_metric,
// train.early_stopping.metric). `trainer eval`, `predict` and `export` are recipe/tasks.h.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <torch/types.h>

#include "data/batch_source.h"

namespace stoker {

struct EvalResult {
  double loss = 0;  // mean cross-entropy (no label smoothing)
  double top1 = 0;  // fraction correct
  double top5 = 0;  // fraction with the target among the 5 highest logits (all, with <= 5 classes)
  int64_t samples = 0;  // the samples evaluated; 0: not evaluated
  int64_t excluded = 0;  // unreadable samples left out (data.on_bad_sample: skip), not in `samples`
};

struct EpochResult {
  int64_t epoch = 0;  // 0-based
  double train_loss = 0;
  // The share of the epoch's training samples whose largest logit is their label: the class index,
  // or with soft targets (mixup/cutmix, label smoothing) the dominant class of the target (NaN when
  // no sample was trained). On the augmented inputs, with the weights as they were at each step.
  double train_top1 = 0;
  EvalResult test;
  EvalResult ema_test;  // the EMA of the weights (train.ema_decay); samples == 0 without one
  double seconds = 0;
  double samples_per_s = 0;
  double data_wait = 0;  // share of the epoch's training time spent waiting for data
  data::StageTimes stages;  // the training loader's per-stage times for the epoch
  // fp16-mixed: the loss scale at the end of the epoch and the optimizer steps skipped so far
  // because of inf/NaN gradients (0 and 1 without loss scaling).
  double loss_scale = 1.0;
  int64_t skipped_steps = 0;
  // train.on_nonfinite: skip: optimizer steps of this epoch skipped for an inf/NaN loss or gradients.
  int64_t nonfinite_skips = 0;
};

// How many rows of `logits` [N, C] have their `target` [N] among their k highest values (k is
// capped at C), as a device scalar (no host synchronisation).
torch::Tensor count_topk_correct(const torch::Tensor& logits, const torch::Tensor& target, int64_t k);

// Runs `forward` under NoGradGuard over one pass of `source` (epoch 0): mean cross-entropy, top-1
// and top-5 over the samples whose target is not data::kExcludedTarget, and how many were excluded.
// Putting the model in eval mode is the caller's business.
EvalResult evaluate_model(const std::function<torch::Tensor(const torch::Tensor&)>& forward,
                          data::BatchSource& source);

// The epoch metrics a best checkpoint or early stopping can follow: test_top1, test_top5, test_loss
// and, with an EMA of the weights, ema_test_top1, ema_test_top5, ema_test_loss.
const std::vector<std::string>& epoch_metric_names();
bool is_epoch_metric(const std::string& name);
// Whether a larger value of the metric is better (top-k) or a smaller one (loss).
bool higher_is_better(const std::string& metric);
// The value of an epoch metric (see is_epoch_metric) in `result`; NaN when the epoch lacks it
// (ema_* without an EMA).
double epoch_metric(const EpochResult& result, const std::string& name);

}  // namespace stoker
