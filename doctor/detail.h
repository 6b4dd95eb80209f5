// What the doctor's parts (doctor.cpp: the ladder; doctor_tune.cpp: tuning and the batch sweep)
// share: timing the training step over a batch source, and the machine's memory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "data/batch_source.h"
#include "data/loader.h"
#include "recipe/config.h"
#include "doctor/doctor.h"
#include "trainer/trainer.h"

namespace stoker::doctor {

// What every doctor measurement starts from: the recipe's device (threads and seed set as training
// sets them), its training split, its loader and a Trainer of its model, cudnn.benchmark applied;
// `config` is the recipe as resolved for the device (train.precision: auto replaced by the choice).
struct Bench {
  Config config;
  torch::Device device = torch::kCPU;
  std::shared_ptr<data::Dataset> dataset;
  std::shared_ptr<data::Loader> loader;
  std::unique_ptr<Trainer> trainer;
};
Bench make_bench(const Config& config);

// `warmup` untimed steps, then `steps` timed ones of trainer.train_step over `source` (new epochs
// as needed), the device synchronised before and after the timed ones.
RungResult measure_rung(const std::string& name, Trainer& trainer, data::BatchSource& source, int64_t warmup,
                        int64_t steps);
// `count` batches of `loader`, kept on its device and handed out again and again.
std::shared_ptr<data::BatchSource> device_cached_source(data::Loader& loader, int64_t count);
// MemAvailable of /proc/meminfo, in bytes (0 when unknown).
double available_memory_bytes();
void synchronize(torch::Device device);

}  // namespace stoker::doctor
