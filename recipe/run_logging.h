// What a `trainer` run records, wired from its plan (docs/runs.md, "Watching a run"): the model's FLOPs and
// the device's peak (observe/efficiency.h), GPU telemetry (observe/telemetry.h) and the
// MetricsLogger with the sinks logging.sinks lists (observe/sinks.h: metrics.jsonl, the console,
// TensorBoard, MLflow, or an application's own).
#pragma once

#include <filesystem>
#include <functional>
#include <memory>

#include <torch/types.h>

#include "observe/efficiency.h"
#include "observe/metrics.h"
#include "recipe/config.h"
#include "recipe/run_plan.h"
#include "trainer/trainer.h"

namespace stoker {

// The configured model's FLOPs per sample of `shape` and the device's peak at the run's precision;
// zeros with logging.flops off. Leaves the random generators as they were.
Efficiency measure_efficiency(const Config& config, const data::InputShape& shape, torch::Device device);

// With data.resolution_schedule (and logging.flops): the training FLOPs per sample of each epoch,
// the model's counted once at each size the schedule reaches in train.epochs; else empty.
std::function<double(int64_t epoch)> training_flops_by_epoch(const Config& config, int64_t channels);

// The run's MetricsLogger with every sink logging.sinks lists (each made by its registered type from
// one SinkContext), GPU telemetry with logging.telemetry on CUDA. Added to `trainer`; returned so
// that the caller can add sinks of its own.
std::shared_ptr<MetricsLogger> add_run_metrics(Trainer& trainer, const RunPlan& plan,
                                               const std::filesystem::path& run_dir, bool live_progress,
                                               const Efficiency& efficiency);

// logging.sample_digests: logs each optimizer step's StepInfo::samples_digest on this rank, as
// "samples of step S (epoch E, batch B): digest 0123456789abcdef".
void add_sample_digest_log(Trainer& trainer);

}  // namespace stoker
