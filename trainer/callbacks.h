// Stoker's built-in callbacks: metrics and progress, checkpoints (last and best), early stopping,
// and stopping on SIGINT/SIGTERM with a checkpoint so that the run can be resumed.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "trainer/logging.h"
#include "trainer/config.h"
#include "trainer/trainer.h"

namespace stoker {

// Writes per-step lines (every train.log_every_steps) and per-epoch lines to metrics.jsonl, drives
// the progress display, and logs each epoch's summary.
class MetricsCallback : public Callback {
 public:
  MetricsCallback(const std::filesystem::path& metrics_file, bool live_progress, int64_t log_every_steps);
  void on_epoch_start(Trainer& trainer, int64_t epoch) override;
  void on_train_step_end(Trainer& trainer, const StepInfo& step) override;
  void on_epoch_end(Trainer& trainer, const EpochResult& result) override;
  void on_fit_end(Trainer& trainer, const FitResult& result) override;

 private:
  void reset_window();

  MetricsWriter writer_;
  std::unique_ptr<Progress> progress_;
  bool live_;
  int64_t every_;
  // The window since the last logged step.
  double window_seconds_ = 0, window_data_seconds_ = 0, window_loss_ = 0;
  int64_t window_samples_ = 0, window_steps_ = 0;
  double mean_step_seconds_ = 0;  // smoothed, for the ETA
};

// Saves `checkpoints/last.pt` after every epoch (and every checkpoint.every_steps steps, and when
// a run is interrupted), and `checkpoints/best.pt` whenever checkpoint.best_metric improves.
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

// Installs SIGINT/SIGTERM handlers that ask the Trainer to stop after its current step (a second
// signal ends the process at once). Returns true once a stop signal arrived.
void install_stop_signal_handlers();
bool stop_signal_received();

// Calls trainer.request_stop() once a stop signal has arrived.
class StopOnSignalCallback : public Callback {
 public:
  void on_train_step_end(Trainer& trainer, const StepInfo& step) override;
};

}  // namespace stoker
