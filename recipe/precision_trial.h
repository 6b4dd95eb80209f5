// train.precision decided by measurement, within bounds: the step that resolve_plan (recipe/resolve.h)
// takes after the cheap checks. With `auto` and two candidates the hardware offers
// (plan_auto_precision), each is timed for a few training steps of the recipe's model on one
// synthetic batch; an explicit precision that does not run natively here is timed against float32.
//
// What it times, and for how long, is said before it starts. Bounded:
// - the batch is the one the run will take (data.batch_size, capped by the samples a rank has);
// - probe steps at growing batches (2, 8, 32, ...) estimate a step's time and memory, each taken only
//   when the last says it stays within the bounds, and each after an unmeasured step at its batch (the
//   first step at a shape makes the optimizer's state and runs cuDNN's algorithm search): a step at the run's batch that would take over
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
#include <functional>
#include <optional>
#include <set>
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

// What a probe step says of a step at another batch (below): the time and the memory per sample.
struct TrialEstimate {
  int64_t probe = 0;            // the measured step's batch
  double ms_per_sample = 0;     // its time over its batch (an over-estimate for larger ones: fixed costs scale too)
  double bytes_per_sample = 0;  // its peak above what was in use before it, over its batch
  double ms(int64_t batch) const { return ms_per_sample * static_cast<double>(batch); }
  double bytes(int64_t batch) const { return bytes_per_sample * static_cast<double>(batch); }
};

// A candidate's training step at a batch size, timed so that no measured step is the first at its
// shape: with cuDNN's benchmark mode on, the first step at a new input shape searches the convolution
// algorithms (seconds at ResNet-50's size), and a timed search reads as a step 10-100x too slow.
class ShapeWarmStep {
 public:
  // `step(size)`: one training step at `size` samples, its milliseconds (the device synchronised after it).
  explicit ShapeWarmStep(std::function<double(int64_t)> step) : step_(std::move(step)) {}
  // One measured step at `size`, after an unmeasured one when `size` is new.
  double timed(int64_t size);
  // One unmeasured step at `size`.
  void untimed(int64_t size);
  bool warm(int64_t size) const { return sizes_.count(size) > 0; }

 private:
  std::function<double(int64_t)> step_;
  std::set<int64_t> sizes_;
};

// Probe steps at growing batches (2, 8, 32, ... up to `batch`), each taken only when the last one says
// a step there stays within `memory_bound` bytes and b.max_step_s; the estimate of the largest. Each
// step is measured on `device` (peak memory), at least `floor_bytes_per_sample` a sample.
TrialEstimate probe_trial_batches(ShapeWarmStep& step, int64_t batch, double memory_bound,
                                  double floor_bytes_per_sample, const TrialBounds& b, torch::Device device);

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
