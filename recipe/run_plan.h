// One training run's configuration resolved once, from the config and the machine: the device, the
// ranks, the precision decision, the batch arithmetic (accumulation, global batch, learning rate),
// the epoch's length in batches and steps, the input shape and the resolved YAML. recipe/resolve.h
// builds it (resolve_plan); the run, the doctor and autotune read it, and nothing downstream
// recomputes what it holds.
//
//   RunPlan plan = resolve_plan(config, distributed);   // the cheap checks first, then the trial
//   TrainingSetup setup = make_training(plan, distributed);
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

#include "common/log.h"
#include "data/batch_source.h"
#include "data/dataset.h"
#include "recipe/config.h"

namespace stoker {

// How train.precision was decided, and the line that says why (empty when there is nothing to say:
// an explicit precision that runs natively here).
struct PrecisionDecision {
  Precision precision = Precision::kFp32;
  std::string line;
  bool warning = false;  // the line warns (an explicit precision more than 2x slower than float32)
  void log() const {     // the line at info or warning level, if there is one
    if (line.empty()) return;
    if (warning) {
      logger().warn("{}", line);
    } else {
      logger().info("{}", line);
    }
  }
};

struct RunPlan {
  Config config;     // as resolved: train.precision decided (never auto); what the run saves and logs
  std::string yaml;  // config_to_yaml(config)
  torch::Device device = torch::kCPU;
  int64_t rank = 0, world_size = 1;  // this process among the data-parallel ranks (0 of 1 alone)
  BatchArithmetic batches;           // shards, accumulation, global batch, learning rate
  PrecisionDecision precision;
  int64_t train_samples = 0;      // in the training split (after data.train_limit)
  int64_t batches_per_epoch = 0;  // this rank's training batches per epoch
  int64_t steps_per_epoch = 0;    // optimizer steps per epoch
  data::InputShape input;         // the training batches' channels x height x width (0 x 0: they vary)
  // cuDNN's autotuner, on when train.cudnn_benchmark is set, the device is CUDA and the input shape
  // is fixed (applied to the process before the precision trial, so the trial and the run both tune).
  bool cudnn_benchmark = false;
  // The training split, made once (null for a plan of an application's own batch source).
  std::shared_ptr<data::Dataset> train_set;
  // The run continues from a checkpoint, which holds the weights: model.pretrained is not read.
  bool resuming = false;
};

}  // namespace stoker
