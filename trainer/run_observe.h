// What a `trainer` run records beyond the loss (README "Watching a run"), wired by run_training:
// - measure_efficiency: the model's training FLOPs per sample and the device's peak, counted once
//   at start (models/flops.h), for achieved TFLOP/s and MFU.
// - TelemetryReading: the GPU telemetry sampler (trainer/telemetry.h), read once per logged step
//   so that metrics.jsonl and TensorBoard show the same numbers.
// - add_logging_callbacks: MetricsCallback (metrics.jsonl, progress, the epoch line) and, with
//   logging.tensorboard, TensorBoardCallback (<run>/tb/).
// - environment_json / write_environment: environment.json in the run directory (CPU, GPU, torch,
//   Stoker's commit), for `trainer report`.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <torch/types.h>

#include "models/flops.h"
#include "trainer/config.h"
#include "trainer/telemetry.h"
#include "trainer/trainer.h"

namespace stoker {

struct Efficiency {
  double train_flops_per_sample = 0;  // 3 x 2 x forward MACs; 0: not counted (logging.flops: false)
  double peak_flops = 0;              // the device's peak FLOP/s at the run's precision; 0: unknown
  std::string peak_source;            // where the peak comes from (the log says it)
};

// The math the training step's matrix products use in `precision`.
models::MathType math_type_of(Precision precision);

// Counts the configured model's FLOPs for one C x H x W sample (on a CPU float32 copy: FLOPs do
// not depend on the dtype) and finds the device's peak (the GPU table, or the CPU's measured
// float32 rate). Logs the result; with logging.flops off, returns zeros.
Efficiency measure_efficiency(const Config& config, int64_t channels, int64_t height, int64_t width,
                              torch::Device device);

// The sampler's mean since the previous logged step, taken once per step: the first caller at a
// step takes it, later callers at the same step get the same sample. Thread-safe.
class TelemetryReading {
 public:
  explicit TelemetryReading(std::unique_ptr<TelemetrySampler> sampler) : sampler_(std::move(sampler)) {}
  std::optional<GpuSample> at_step(int64_t step);

 private:
  std::unique_ptr<TelemetrySampler> sampler_;
  std::mutex mutex_;
  int64_t step_ = -1;
  std::optional<GpuSample> sample_;
};

// GPU telemetry for the run's device per logging.telemetry; nullptr (after one info line saying
// why, from start_gpu_telemetry) where there is none.
std::shared_ptr<TelemetryReading> start_run_telemetry(const Config& config, torch::Device device);

// Adds MetricsCallback (metrics.jsonl with TFLOP/s, MFU and telemetry) and, with
// logging.tensorboard, TensorBoardCallback writing <run_dir>/tb/events.out.tfevents.*.
void add_logging_callbacks(Trainer& trainer, const Config& config, const std::filesystem::path& run_dir,
                           bool live_progress, const Efficiency& efficiency,
                           const std::shared_ptr<TelemetryReading>& telemetry);

// One JSON object: host, cpu (model name), cpu_cores, device, gpu (name, when training on CUDA),
// torch (libtorch's version), stoker_commit (the source tree's `git describe`, when it is a git
// checkout; "unknown" otherwise), started (UTC, ISO 8601).
std::string environment_json(torch::Device device);
// Writes environment_json to <run_dir>/environment.json (atomically).
void write_environment(const std::filesystem::path& run_dir, torch::Device device);

}  // namespace stoker
