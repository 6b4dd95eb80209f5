// What a run records, computed once and fanned out: the MetricsLogger (a Trainer callback) turns
// the loop's steps into one StepRecord per logging step and one EpochRecord per epoch, and hands each
// to every sink: metrics.jsonl (observe/metrics_file.h), the console's progress and epoch lines
// (observe/console.h), TensorBoard (observe/tensorboard.h), MLflow (observe/mlflow.h). A sink never
// computes a rate or reads the device itself, so every output shows the same numbers.
//
//   auto metrics = std::make_shared<stoker::MetricsLogger>(stoker::MetricsOptions().set_log_every_steps(50));
//   metrics->add_sink(std::make_shared<stoker::MetricsFileSink>(run_dir / "metrics.jsonl"));
//   metrics->add_sink(std::make_shared<stoker::TensorBoardSink>(run_dir / "tb"));
//   trainer.add_callback(metrics);
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "observe/telemetry.h"
#include "trainer/trainer.h"

namespace stoker {

// One logging window: the optimizer steps since the last logged one (an epoch starts a new window).
struct StepRecord {
  int64_t epoch = 0, epochs = 0;   // 0-based epoch of the run's `epochs`
  int64_t batch = 0, batches = 0;  // batches of the epoch done (1-based) and in it
  int64_t step = 0;                // optimizer steps so far (the x axis everywhere)
  double loss = 0;                 // the last batch's loss
  double lr = 0;
  double samples_per_s = 0;        // over the window
  double data_wait = 0;            // share of the window's time spent waiting for input
  double eta_s = 0;                // until the run's last step, from the smoothed step time
  std::optional<double> gpu_idle;  // CUDA: share of GPU time idle between steps in the window
  std::optional<double> tflops, mfu;      // with a FLOP count (and a peak)
  std::optional<GpuSample> telemetry;     // CUDA with NVML: the mean since the last logged step
  std::optional<double> loss_scale;       // fp16-mixed: the loss scaler's scale
  std::optional<int64_t> skipped_steps;   // fp16-mixed: optimizer steps skipped for inf/NaN so far
};

struct EpochRecord {
  EpochResult result;
  int64_t epochs = 0;
  int64_t step = 0;                   // optimizer steps at the epoch's end
  std::optional<double> tflops, mfu;  // over the epoch
  bool loss_scaling = false;          // fp16-mixed: result.loss_scale and skipped_steps mean something
};

// A destination of the records. Called on the training thread: a sink that talks to something slow
// (a server) queues and returns.
class MetricsSink {
 public:
  virtual ~MetricsSink() = default;
  virtual void start(int64_t /*step*/) {}  // fit() begins at optimizer step `step` (> 0: resumed)
  // Whether the sink shows progress between logging steps at this batch (1-based) of `batches`; the
  // logger then reads the loss (a device synchronisation) and calls progress().
  virtual bool wants_progress(int64_t /*batch*/, int64_t /*batches*/) const { return false; }
  virtual void progress(const StepRecord& /*record*/) {}
  virtual void step(const StepRecord& record) = 0;    // every logging step
  virtual void epoch(const EpochRecord& record) = 0;  // after each epoch's evaluation
  virtual void end(const FitResult& /*result*/) {}    // fit() ended (stopped runs too): flush, close
};

// A metric as TensorBoard and MLflow name it ("train/loss", "test/top1", "gpu/power_w", ...).
struct Scalar {
  std::string tag;
  double value = 0;
};
// A record's scalars under those names: train/loss, train/lr, train/samples_per_s, train/data_wait,
// train/gpu_idle, train/loss_scale, train/skipped_steps, perf/tflops, perf/mfu and gpu/* (the ones
// the record has); an epoch's: train/epoch_loss, test/*, ema_test/*, epoch/*, data/*.
std::vector<Scalar> scalars_of(const StepRecord& record);
std::vector<Scalar> scalars_of(const EpochRecord& record);
// gpu/utilization, gpu/memory_used_gib, gpu/power_w, gpu/temperature_c, gpu/sm_clock_mhz.
std::vector<Scalar> telemetry_scalars(const std::optional<GpuSample>& sample);

struct MetricsOptions {
  int64_t log_every_steps = 50;       // a record every N optimizer steps and at each epoch's end
  double train_flops_per_sample = 0;  // > 0: tflops (observe/efficiency.h)
  double peak_flops = 0;              // > 0 with the above: mfu
  // When set: each epoch's training FLOPs per sample, in place of train_flops_per_sample from the
  // epoch's start on (the input size changes by epoch with data.resolution_schedule).
  std::function<double(int64_t epoch)> flops_at_epoch;
  // When set: the GPU telemetry for the logged step (the sampler's mean since the last one).
  std::function<std::optional<GpuSample>()> telemetry;

  MetricsOptions& set_log_every_steps(int64_t v) { log_every_steps = v; return *this; }
  MetricsOptions& set_flops(double per_sample, double peak) {
    train_flops_per_sample = per_sample;
    peak_flops = peak;
    return *this;
  }
  MetricsOptions& set_flops_at_epoch(std::function<double(int64_t)> v) { flops_at_epoch = std::move(v); return *this; }
  MetricsOptions& set_telemetry(std::function<std::optional<GpuSample>()> v) { telemetry = std::move(v); return *this; }
};

// What the loop itself cannot give a record without a device read: taken by the callback from the
// Trainer at a logging step, or handed in by a caller of log_step().
struct StepReadings {
  std::optional<double> gpu_idle;
  std::optional<double> loss_scale;
  std::optional<int64_t> skipped_steps;
};

class MetricsLogger : public Callback {
 public:
  explicit MetricsLogger(MetricsOptions options);
  void add_sink(std::shared_ptr<MetricsSink> sink);
  // MetricsOptions::flops_at_epoch, after construction (the run counts them once the model is known).
  void set_flops_at_epoch(std::function<double(int64_t epoch)> f) { options_.flops_at_epoch = std::move(f); }

  void on_fit_start(Trainer& trainer) override;
  void on_epoch_start(Trainer& trainer, int64_t epoch) override;
  void on_train_step_end(Trainer& trainer, const StepInfo& step) override;
  void on_epoch_end(Trainer& trainer, const EpochResult& result) override;
  void on_fit_end(Trainer& trainer, const FitResult& result) override;

  // The same without a Trainer (tests, other loops): `epochs` and `total_steps` of the run, the step
  // and what was read for it; log_step adds it to the window and, at a logging step, fans the record
  // out (returns whether it did).
  bool log_step(const StepInfo& step, int64_t epochs, int64_t total_steps, const StepReadings& readings);
  void log_epoch(const EpochResult& result, int64_t epochs, int64_t step, bool loss_scaling);
  void start(int64_t step);
  void end(const FitResult& result);

  // Whether `step` ends a logging window: an optimizer step at the interval, or an epoch's last batch.
  bool due(const StepInfo& step) const;

 private:
  StepRecord record(const StepInfo& step, int64_t epochs, int64_t total_steps) const;
  void add_efficiency(double samples_per_s, std::optional<double>& tflops, std::optional<double>& mfu) const;
  void check_starved(const StepRecord& record);
  void reset_window();

  MetricsOptions options_;
  std::vector<std::shared_ptr<MetricsSink>> sinks_;
  double window_seconds_ = 0, window_data_seconds_ = 0;
  int64_t window_samples_ = 0;
  double mean_step_seconds_ = 0;   // smoothed, for the ETA
  int64_t starved_windows_ = 0;    // logged windows in a row with the GPU idle for want of data
  bool warned_starved_ = false;
};

}  // namespace stoker
