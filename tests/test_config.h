// The tests' small config (recipe layer): a tiny run on write_synthetic_idx_dataset's data; and what the
// resume tests share (the weights to compare, a Trainer on the synthetic data, a callback that interrupts a run).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "recipe/config.h"
#include "test_util.h"
#include "trainer/trainer.h"

namespace stoker::testing {

// A small, fast config for training on write_synthetic_idx_dataset's data.
Config tiny_config(const std::filesystem::path& data_root, const std::filesystem::path& run_dir);

// Copies of every parameter and buffer of the trainer's model, in module order.
std::vector<torch::Tensor> weights(Trainer& t);

// A Trainer on the synthetic IDX data under config.data.root (CPU), its model initialised from
// `init_seed`: the recipe tests' way to train, stop and resume in one process.
std::unique_ptr<Trainer> synthetic_trainer(const Config& config, uint64_t init_seed);

// Stops the trainer after a given optimizer step (an interruption, for the resume tests).
struct StopAtStep : Callback {
  explicit StopAtStep(int64_t s) : step(s) {}
  void on_train_step_end(Trainer& t, const StepInfo& info) override {
    if (info.step == step) t.request_stop();
  }
  int64_t step;
};

// data.batch_ops with both of Stoker's operations: pixel erasing with probability 0.5, then mixup
// (alpha 0.8) or CutMix (alpha 1.0) per sample.
std::vector<TypedOptions> erasing_and_mixup();

}  // namespace stoker::testing
