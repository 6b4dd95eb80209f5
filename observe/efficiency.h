// How well a run uses its device: the model's training FLOPs per sample, counted once at start
// (models/flops.h), and the device's peak at the run's precision, so that metrics carry achieved
// TFLOP/s and MFU (MetricsOptions::set_flops in observe/metrics.h).
#pragma once

#include <string>

#include <torch/nn/modules/container/any.h>
#include <torch/types.h>

#include "data/batch_source.h"
#include "models/flops.h"
#include "trainer/precision.h"

namespace stoker {

struct Efficiency {
  double train_flops_per_sample = 0;  // 3 x 2 x forward MACs; 0: not counted
  double peak_flops = 0;              // the device's peak FLOP/s at the run's precision; 0: unknown
  std::string peak_source;            // where the peak comes from (the log says it)
};

// The math the training step's matrix products use in `precision`.
models::MathType math_type_of(Precision precision);

// Counts `model`'s FLOPs for one sample of `shape` (a CPU float32 copy does: FLOPs do not depend on
// the dtype) and finds the device's peak (the GPU table, or the CPU's measured rate). Logs the result.
Efficiency measure_efficiency(torch::nn::AnyModule& model, const data::InputShape& shape, torch::Device device,
                              Precision precision);

}  // namespace stoker
