// The callbacks that steer a run: checkpoints (last and best), early stopping, a timeline window,
// and stopping on SIGINT/SIGTERM with a checkpoint so that the run can be resumed. Each takes its
// own options struct (the config layer maps checkpoint.* and train.early_stopping / train.trace
// onto them). What a run records (metrics, progress, TensorBoard) is observe/'s.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/error.h"
#include "trainer/trainer.h"

namespace stoker {

struct CheckpointOptions {
  bool save_last = true;
  bool save_best = true;
  std::string best_metric = "test_top1";  // an epoch metric (see is_epoch_metric in trainer/evaluate.h)
  int64_t every_steps = 0;                // also save `last` every N optimizer steps; 0 = per epoch
};

// Stops training once `metric` has not improved by more than min_delta for `patience` epochs.
struct EarlyStoppingOptions {
  std::string metric = "test_top1";  // an epoch metric (see is_epoch_metric)
  int64_t patience = 0;              // epochs without improvement before stopping; 0 = off
  double min_delta = 0.0;            // smaller improvements do not count
};

// A timeline of a window of training steps, written as Trace Event JSON (common/trace.h): from
// optimizer step `start_step` for `steps` steps; steps 0 = off.
struct TraceOptions {
  int64_t start_step = 100;
  int64_t steps = 0;
};

// Saves `checkpoints/last.pt` after every epoch (and every checkpoint.every_steps steps, and when
// a run is interrupted), and `checkpoints/best.pt` whenever checkpoint.best_metric improves.
// An empty `folder`: a rank that writes nothing but takes part in each save at the same moments (a
// sharded optimizer's state is gathered on rank 0 then: Trainer::save_checkpoint).
class CheckpointCallback : public Callback {
 public:
  CheckpointCallback(const std::filesystem::path& folder, CheckpointOptions options);
  void on_train_step_end(Trainer& trainer, const StepInfo& step) override;
  void on_epoch_end(Trainer& trainer, const EpochResult& result) override;
  void on_fit_end(Trainer& trainer, const FitResult& result) override;

  struct SavedCheckpoint {
    std::filesystem::path path;
    int64_t step = 0;
  };
  // The checkpoint this callback wrote last (every one it wrote held finite weights: see
  // Trainer::save_checkpoint); nothing before the first.
  const std::optional<SavedCheckpoint>& last_saved() const { return last_saved_; }

 private:
  void save(Trainer& trainer, const char* name);
  std::filesystem::path folder_;
  CheckpointOptions options_;
  std::optional<SavedCheckpoint> last_saved_;
};

// train.early_stopping: ends the run (as finished, not interrupted: last.pt is saved as after any
// epoch) once its metric has not improved by more than min_delta for `patience` epochs, and logs
// why. The best value and its epoch live in TrainState, so a resumed run keeps counting.
class EarlyStoppingCallback : public Callback {
 public:
  explicit EarlyStoppingCallback(EarlyStoppingOptions options) : options_(std::move(options)) {}
  // Decides here, before the epoch's checkpoint is written, so that the checkpoint holds the count.
  void on_validation_end(Trainer& trainer, const EpochResult& result) override;
  // Says why after the epoch's summary line.
  void on_epoch_end(Trainer& trainer, const EpochResult& result) override;

 private:
  EarlyStoppingOptions options_;
  std::string reason_;
};

// train.trace: records optimizer steps [start_step, start_step + steps) as a timeline (common/trace.h)
// and writes it to `path` when the window closes, or when fit() ends first.
class TraceCallback : public Callback {
 public:
  TraceCallback(std::filesystem::path path, TraceOptions options) : path_(std::move(path)), options_(options) {}
  void on_fit_start(Trainer& trainer) override;
  void on_train_step_end(Trainer& trainer, const StepInfo& step) override;
  void on_fit_end(Trainer& trainer, const FitResult& result) override;

 private:
  void finish(int64_t step);
  std::filesystem::path path_;
  TraceOptions options_;
  bool recording_ = false, written_ = false;
};

// Installs SIGINT/SIGTERM handlers that ask the Trainer to stop after its current step, and the
// start-up phases (the precision trial, autotune, the FLOPs count) after their current step: the first
// signal says so on stderr; a second one ends the process at once.
void install_stop_signal_handlers();
bool stop_signal_received();
// Forgets a stop signal that arrived (a program that handled the stop and goes on to train again).
void reset_stop_signal();

// A stop signal arrived during a start-up phase: nothing was trained or written.
class StopRequested : public Error {
 public:
  using Error::Error;
};
// Throws StopRequested naming `phase` ("the precision trial") when a stop signal has arrived; the
// start-up phases call it between their steps.
void check_stop_requested(const std::string& phase);

// Calls trainer.request_stop() once a stop signal has arrived.
class StopOnSignalCallback : public Callback {
 public:
  void on_train_step_end(Trainer& trainer, const StepInfo& step) override;
};

}  // namespace stoker
