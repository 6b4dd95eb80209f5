// Stoker's built-in callbacks: metrics and progress, checkpoints (last and best), early stopping,
// and stopping on SIGINT/SIGTERM with a checkpoint so that the run can be resumed.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "trainer/logging.h"
#include "trainer/config.h"
#include "trainer/telemetry.h"
#include "trainer/trainer.h"

namespace stoker {

// What MetricsCallback adds beyond the loop's own numbers.
struct MetricsOptions {
  // > 0: achieved TFLOP/s (samples/s x this) in step and epoch lines ("tflops") and the epoch log line.
  double train_flops_per_sample = 0;
  // > 0 (with the above): MFU = achieved / peak ("mfu").
  double peak_flops = 0;
  // When set: the GPU telemetry of each logged step (gpu_* fields of step lines).
  std::function<std::optional<GpuSample>(int64_t step)> telemetry;
};

// Writes per-step lines (every train.log_every_steps) and per-epoch lines to metrics.jsonl, drives
// the progress display, and logs each epoch's summary.
class MetricsCallback : public Callback {
 public:
  MetricsCallback(const std::filesystem::path& metrics_file, bool live_progress, int64_t log_every_steps,
                  MetricsOptions options = {});
  void on_epoch_start(Trainer& trainer, int64_t epoch) override;
  void on_train_step_end(Trainer& trainer, const StepInfo& step) override;
  void on_epoch_end(Trainer& trainer, const EpochResult& result) override;
  void on_fit_end(Trainer& trainer, const FitResult& result) override;
  // The GPU idle share of the last logged window (the Trainer's, taken at each logging step), < 0
  // when not measured (the CPU). The TensorBoard callback, added after this one, logs it.
  double gpu_idle() const { return gpu_idle_; }

 private:
  void reset_window();
  // tflops and mfu for `samples_per_s` into `line`; the same as text for the epoch line ("" without).
  std::string add_efficiency(JsonLine& line, double samples_per_s) const;

  MetricsWriter writer_;
  MetricsOptions options_;
  std::unique_ptr<Progress> progress_;
  bool live_;
  int64_t every_;
  // The window since the last logged step.
  double window_seconds_ = 0, window_data_seconds_ = 0, window_loss_ = 0;
  int64_t window_samples_ = 0, window_steps_ = 0;
  double mean_step_seconds_ = 0;  // smoothed, for the ETA
  double gpu_idle_ = -1;          // the last logged window's (CUDA), < 0: not measured
  int64_t starved_windows_ = 0;   // logged windows in a row with the GPU idle for want of data
  bool warned_starved_ = false;
  void check_starved(double data_wait);
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
