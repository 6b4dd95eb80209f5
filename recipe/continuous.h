// data.autotune: continuous: a run that watches how long its step waits for data, logging window by
// logging window, and adds loader workers between steps when it keeps waiting (never oscillating:
// hysteresis, a cooldown, and an undo that caps the workers for good). The decision is
// continuous_step, a function of the windows' numbers; ContinuousWorkers is the Trainer callback that
// measures the windows and applies it to a RetunableLoader (data/retunable_loader.h), whose batches do
// not depend on the worker count, so a change never drops, repeats or reorders a sample.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "data/retunable_loader.h"
#include "data/settings.h"
#include "trainer/trainer.h"

namespace stoker {

// When a run's logging windows say the step waits for data, add workers; never oscillate.
struct ContinuousPolicy {
  double starved_wait = 0.10;  // a window whose data wait share is above this counts as starved ...
  double fed_wait = 0.05;      // ... and only one below this ends a streak (between: neither; hysteresis)
  // On CUDA also one whose GPU idle share between steps is above this while the step waited for data
  // at least fed_wait (GPU idle with no data wait is the host's own overhead: workers do not cure it).
  double starved_gpu_idle = 0.10;
  int64_t windows = 3;         // this many starved windows ask for more workers
  int64_t cooldown = 5;        // windows after a change before it is judged and another may come
  double worse = 0.95;         // a change whose samples/s over its cooldown is below this x before is undone
  int64_t max_workers = 8;

  // data.autotune_continuous, with max_workers 0 resolved to twice `cores`, at most 8.
  static ContinuousPolicy from(const data::AutotuneWatch& watch, int64_t cores);
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
// One logging window: its data wait share, samples/s and (on CUDA) GPU idle share. Doubles the workers (0 -> 1 -> 2 -> 4, up
// to the cap) after `windows` starved windows, then waits `cooldown` windows and undoes the change
// when samples/s fell (on the CPU workers take the model's cores), lowering the cap to what it was:
// the workers only rise until a rise does not pay, and each undo is final.
ContinuousStep continuous_step(ContinuousState& state, const ContinuousPolicy& policy, double data_wait,
                               double samples_per_s, std::optional<double> gpu_idle = std::nullopt);

// The callback: every `window_steps` steps (train.log_every_steps) it takes the window's data wait
// share (seconds waiting for batches / seconds of steps), samples/s and the Trainer's GPU idle share
// (CUDA; the reading the metrics log shows for the same window), asks continuous_step, and on a
// change sets the loader's workers (and, on the CPU with run.threads 0, libtorch's threads to the
// cores they leave, as at a run's start) and logs it.
class ContinuousWorkers : public Callback {
 public:
  ContinuousWorkers(std::shared_ptr<data::RetunableLoader> loader, ContinuousPolicy policy, int64_t window_steps,
                    int64_t run_threads, bool on_cpu);
  void on_train_step_end(Trainer& trainer, const StepInfo& step) override;
  // What on_train_step_end does (tests call it without a Trainer); returns the change said, or "".
  // `gpu_idle` is read only at a window's end.
  std::string observe(const StepInfo& step, const std::function<std::optional<double>()>& gpu_idle = {});
  const ContinuousState& state() const { return state_; }

 private:
  std::shared_ptr<data::RetunableLoader> loader_;
  ContinuousPolicy policy_;
  ContinuousState state_;
  int64_t window_steps_, run_threads_;
  bool on_cpu_;
  int64_t steps_ = 0, samples_ = 0;
  double wait_seconds_ = 0, step_seconds_ = 0;
};

}  // namespace stoker
