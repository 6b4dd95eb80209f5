// What the doctor's parts (doctor.cpp: the ladder; doctor_tune.cpp: tuning and the batch sweep)
// share: timing the training step over a batch source, and the machine's memory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "data/batch_source.h"
#include "data/loader.h"
#include "recipe/config.h"
#include "recipe/run_plan.h"
#include "doctor/doctor.h"
#include "trainer/trainer.h"

namespace stoker::doctor {

// What every doctor measurement starts from: the run's plan (recipe/resolve.h: the device, threads
// and seed set as training sets them, the training split, train.precision decided), its loader and a
// Trainer of its model, the run's process-wide settings applied.
struct Bench {
  RunPlan plan;
  std::shared_ptr<data::Loader> loader;
  std::unique_ptr<Trainer> trainer;
  const Config& config() const { return plan.config; }
  torch::Device device() const { return plan.device; }
};
// From a resolved plan (data.autotune: start: the run's own), or from a recipe (resolving its plan
// and logging the precision decision).
Bench make_bench(const RunPlan& plan);
Bench make_bench(const Config& config);

// `warmup` untimed steps, then `steps` timed ones of trainer.train_step over `source` (new epochs
// as needed), the device synchronised before and after the timed ones.
RungResult measure_rung(const std::string& name, Trainer& trainer, data::BatchSource& source, int64_t warmup,
                        int64_t steps);
// The fastest rung after the first (device-cached) that measured over 10% faster than it; null when
// none. A rung that adds work cannot be faster on a steady machine: such a rung says the ceiling was slowed.
const RungResult* faster_than_ceiling(const std::vector<RungResult>& rungs);
// When faster_than_ceiling finds a rung, the ceiling (rungs[0]) takes that rung's speed, with no stage
// costs, and result.context says from which rung and what device-cached measured.
void take_slowed_ceiling(LadderResult& result);
// `count` batches of `loader`, kept on its device and handed out again and again.
std::shared_ptr<data::BatchSource> device_cached_source(data::Loader& loader, int64_t count);
void synchronize(torch::Device device);

}  // namespace stoker::doctor
