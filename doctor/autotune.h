// data.autotune: start (data/settings.h): a run that tunes its own input pipeline before its first
// epoch, with the doctor's --tune on the run's loader and model, within a budget of time and of the
// run's share. run_training calls it through TrainRequest::autotune (recipe/run.h).
#pragma once

#include <string>

#include "doctor/doctor.h"
#include "recipe/config.h"
#include "recipe/run.h"

namespace stoker {

// The config with `r`'s winner applied (data.workers, prefetch_factor, device_prefetch, cache).
Config apply_tuned(const Config& config, const TuneResult& r);

// Before and after in one line: "data.autotune: start: workers 0 -> 2, ...: 209.0 -> 405.3 samples/s
// (1.10 of the device-cached ceiling of 366.8); 4 trials in 32.6 s (budget 45.0 s: ...)".
std::string autotune_line(const Config& config, const TuneResult& r);

// doctor.json of an autotuned run: the ceiling (device_cached_*) and the tuned pipeline (full_*) as the
// ladder names them, so that `trainer report` draws them, the start and the winner, and the line.
std::string autotune_json(const Config& config, const TuneResult& r);

// Runs the tune for the run's `plan` (data.autotune_budget_s, data.autotune_max_share of its
// train.epochs; its precision already decided) and returns the config to train with, the line and
// doctor.json. The hook `trainer` sets.
AutotuneOutcome autotune_at_start(const RunPlan& plan);

}  // namespace stoker
