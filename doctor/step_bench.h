// `trainer bench-step`: the recipe's model, optimizer and precision trained on one batch of its data
// that is already on the device, so that only the training step is timed (forward, backward,
// optimizer; replayed as a CUDA graph with train.cuda_graph): the ladder's device-cached rung
// (doctor/doctor.h) on a single batch.
#pragma once

#include <cstdint>
#include <string>

#include "recipe/config.h"

namespace stoker {

struct StepBenchResult {
  int64_t steps = 0;
  int64_t batch_size = 0;
  double seconds = 0;
  double ms_per_step = 0;
  double samples_per_s = 0;
  bool graph = false;  // the timed steps were graph replays
  std::string device;
  Precision precision = Precision::kFp32;  // as trained (train.precision: auto resolved)
  std::string hardware;                    // the device's features (HardwareFeatures::summary)
  double peak_memory_mb = 0;  // the timed steps' peak (CUDA: the allocator's reserved bytes; CPU: the resident set)
};

// `warmup` untimed steps first (a CUDA graph is captured during them), then `steps` timed ones; the
// loss must stay finite.
StepBenchResult bench_train_step(const Config& config, int64_t steps, int64_t warmup = 10);

}  // namespace stoker
