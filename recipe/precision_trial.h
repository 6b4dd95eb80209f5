// train.precision decided by measurement, within bounds: the step that resolve_plan (recipe/resolve.h)
// takes after the cheap checks. With `auto` and two candidates the hardware offers
// (plan_auto_precision), each is timed for a few training steps of the recipe's model on one
// synthetic batch; an explicit precision that does not run natively here is timed against float32.
//
// What it times, and for how long, is said before it starts. Bounded:
// - the batch is the one the run will take (data.batch_size, capped by the samples a rank has);
// - probe steps at growing batches (2, 8, 32, ...) estimate a step's time and memory, each taken only
//   when the last says it stays within the bounds: a step at the run's batch that would take over
//   `max_step_s` or need over `memory_share` of the memory available is timed at the largest smaller
//   batch (halving) that fits, and the line says so;
// - the whole trial takes at most `max_share` of the run's estimated length (and never more than
//   `max_budget_s`, always allowing `min_budget_s`): when even a few steps would not fit, nothing more
//   is timed and the hardware's first candidate is kept, which the line says;
// - the first Ctrl-C / SIGTERM stops it after the current step (StopRequested).
// The candidates' steps are interleaved (a, b, a, b, ...) after an untimed warm-up of each, so that load
// from other processes falls on both; the faster wins only when its median is over 3% faster and the
// two candidates' ranges of step times do not overlap; otherwise the line says "tie" and the hardware's
// first candidate is kept.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/hardware.h"
#include "recipe/run_plan.h"
#include "trainer/precision_choice.h"

namespace stoker {

struct TrialBounds {
  int64_t warmup = 1;           // untimed steps of each candidate
  int64_t rounds = 5;           // timed steps of each candidate, interleaved
  double max_step_s = 2.0;      // a longer step at the run's batch: time a smaller batch
  double memory_share = 0.5;    // of available_memory_bytes(device) that one step may use
  double max_share = 0.02;      // of the run's estimated length
  double min_budget_s = 1.0;    // the trial may always take this long
  double max_budget_s = 30.0;   // and never longer
};

// One candidate's timed steps.
struct TrialTimes {
  Precision precision = Precision::kFp32;
  std::vector<double> ms;  // each timed step (warm-up excluded)
  double median() const;
  double min() const;
  double max() const;
};

// The verdict on two or more candidates' times: the winner and whether it is a tie (the first
// candidate kept because the difference is within the noise).
struct TrialVerdict {
  Precision chosen = Precision::kFp32;
  bool tie = false;
  double speedup = 1.0;  // the slower median over the chosen one's
};
// `times` in the plan's order (the first is kept on a tie).
TrialVerdict judge_trial(const std::vector<TrialTimes>& times);

// An explicit precision whose median step took more than twice float32's: the warning, naming the
// faster choice; nothing otherwise.
std::optional<std::string> slow_precision_warning(const TrialTimes& requested, const TrialTimes& fp32,
                                                  const HardwareFeatures& hardware);

// The precision `plan` (with its input shape, batch and length resolved) trains in, and why: on the
// plan's device as detect_hardware finds it, or as `hardware` says (tests force each answer).
PrecisionDecision decide_precision(const RunPlan& plan, const TrialBounds& bounds = {});
PrecisionDecision decide_precision(const RunPlan& plan, const TrialBounds& bounds, const HardwareFeatures& hardware);

// The median milliseconds of a training step of the plan's model in `precision` (channels-last or
// not) on a synthetic batch of the plan's shape at its batch (capped by its data), after `warmup`
// untimed steps (the doctor's table of step variants). The random generators and TF32 are left as
// they were; a stop signal ends it (StopRequested).
double median_step_ms(const RunPlan& plan, Precision precision, bool channels_last, int64_t warmup = 2,
                      int64_t steps = 5);

}  // namespace stoker
