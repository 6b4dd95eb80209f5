// Resolving a run's plan (recipe/run_plan.h) from its config and the machine, once, in this order:
//   1. the process's settings: the device made current, libtorch's threads, the seed;
//   2. the cheap checks: the batch arithmetic (train.effective_batch_size against the ranks), the
//      training split (its folders and classes) and its samples against one batch;
//   3. cuDNN's autotuner, on for a fixed input shape on CUDA (before any step is timed);
//   4. train.precision: decided by the bounded trial (recipe/precision_trial.h) on rank 0 and handed
//      to the other ranks, so that every rank trains in the same precision;
//   5. the resolved YAML.
// `trainer` (run_training), `trainer doctor` and data.autotune: start all start from it.
#pragma once

#include <cstdint>

#include "data/batch_source.h"
#include "recipe/config.h"
#include "recipe/join.h"
#include "recipe/precision_trial.h"
#include "recipe/run_plan.h"

namespace stoker {

// The plan of one rank of a run (alone: `distributed` of one process on its device).
RunPlan resolve_plan(const Config& config, const Distributed& distributed, const TrialBounds& bounds = {});
// Alone, on run.device.
RunPlan resolve_plan(const Config& config);

// The plan of a Trainer on an application's own training source (make_trainer): its batches and its
// shape instead of a data set's; train.precision: auto decided by the trial; nothing process-wide set.
RunPlan plan_for_source(const Config& config, const data::BatchSource& train, torch::Device device,
                        int64_t world_size = 1, int64_t rank = 0);

// The loader settings data.autotune: start chose (`tuned`'s data.workers, prefetch_factor,
// device_prefetch and cache) put into the plan: the threads set again for the workers, the training
// split made again when the cache changed, the YAML written again.
void apply_loader_settings(RunPlan& plan, const Config& tuned);

// The run's process-wide settings, once the plan is made: TF32 for its precision and cuDNN's autotuner.
void apply_process_settings(const RunPlan& plan);

}  // namespace stoker
