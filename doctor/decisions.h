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

// ---- data.autotune: continuous (the decision; RetunableLoader, data/retunable_loader.h, applies it) ----

// When a run's logging windows say the step waits for data, add workers; never oscillate.
struct ContinuousPolicy {
  double starved_wait = 0.10;  // a window whose data wait share is above this counts as starved ...
  double fed_wait = 0.05;      // ... and only one below this ends a streak (between: neither; hysteresis)
  int64_t windows = 3;         // this many starved windows ask for more workers
  int64_t cooldown = 5;        // windows after a change before it is judged and another may come
  double worse = 0.95;         // a change whose samples/s over its cooldown is below this x before is undone
  int64_t max_workers = 8;
};
struct ContinuousState {
  int64_t workers = 0;          // the loader's workers now
  int64_t cap = -1;             // the most workers to try (-1: the policy's); an undone change lowers it for good
  int64_t streak = 0;           // starved windows counted since the last fed one
  double streak_samples = 0;    // their samples/s, summed (what a change is judged against)
  int64_t since_change = -1;    // windows since the change being judged; -1: none
  int64_t previous = 0;         // the workers before that change
  double before = 0, after_sum = 0;  // samples/s before it; summed over its cooldown
};
struct ContinuousStep {
  int64_t workers = 0;  // the workers to have from now on (the state's, unless changed)
  std::string why;      // the change in words; "" when nothing changes
};
// One logging window: its data wait share and samples/s. Doubles the workers (0 -> 1 -> 2 -> 4, up
// to the cap) after `windows` starved windows, then waits `cooldown` windows and undoes the change
// when samples/s fell (on the CPU workers take the model's cores), lowering the cap to what it was:
// the workers only rise until a rise does not pay, and each undo is final.
ContinuousStep continuous_step(ContinuousState& state, const ContinuousPolicy& policy, double data_wait,
                               double samples_per_s);

}  // namespace stoker
