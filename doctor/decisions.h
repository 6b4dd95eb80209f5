// The doctor's decisions, as pure functions of measured numbers: the batch size at the knee of a
// sweep and the learning rate that goes with it, and whether a ladder keeps the performance contract
// (`trainer doctor --check`). Nothing here times anything: tests give them recorded measurements.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "doctor/doctor.h"
#include "recipe/config.h"

namespace stoker {

// ---- the batch size at the knee ----

// The learning rate for another data.batch_size, by the recipe's rule: with optimizer.lr_reference_batch
// set the run scales optimizer.lr linearly itself, and with train.effective_batch_size the samples per
// optimizer step do not change, so optimizer.lr stays in both; otherwise linear for sgd (Goyal et al.,
// 2017), the square root of the ratio for the Adam family (a type whose name contains "adam"; Malladi
// et al., 2022), and for any other registered type the rate stays and `rule` says to check it.
struct LrRescale {
  double lr = 0;         // optimizer.lr to set
  bool changed = false;  // lr differs from the recipe's optimizer.lr
  std::string rule;      // the rule, in words
};
LrRescale rescale_lr(const Config& config, int64_t batch_size);

constexpr double kDefaultKnee = 0.1;  // `--knee`: stop where a doubling gains under 10% samples/s

struct BatchChoice {
  int64_t batch_size = 0;           // 0: no size fits
  LrRescale lr;
  std::vector<std::string> lines;   // why this size and this rate, in words
  std::string set_line() const;     // "--set data.batch_size=64 --set optimizer.lr=0.2" ("" without a size)
};
// Of the sizes that fit and are a power of two or a multiple of 8 (and, with
// train.effective_batch_size, divide it), the knee is the smallest that no larger one beats by `knee`
// of samples/s per doubling ((larger/this)^(1/log2 of the size ratio) - 1): past it, doubling the batch
// gains less than that. When every size has a larger one that pays, the largest. A single slow
// measurement on the way up does not stop the walk there. Then rescale_lr for it.
BatchChoice choose_batch(const Config& config, const std::vector<BatchTrial>& trials, double knee = kDefaultKnee);

// ---- the performance contract ----

constexpr double kDefaultMinRatio = 0.9;  // `--check --min-ratio`

struct ContractVerdict {
  bool kept = false;     // the full pipeline trains at >= min_ratio of the device-cached ceiling
  double ratio = 0;      // full / device-cached samples/s (0 when either was not measured)
  std::string line;      // the verdict in one line
};
// The full rung against the device-cached ceiling of a ladder's rungs; a ladder missing either rung
// breaks the contract (the line says which is missing).
ContractVerdict check_contract(const std::vector<RungResult>& rungs, double min_ratio = kDefaultMinRatio);

// ---- data.autotune: start ----

// Seconds a run's start may spend tuning its loader: the smaller of data.autotune_budget_s and
// data.autotune_max_share of the run's estimated length (its samples at the starting settings'
// samples/s), so that a 5-minute run does not spend 90 s tuning.
double autotune_budget(double budget_s, double max_share, double estimated_run_s);

}  // namespace stoker
