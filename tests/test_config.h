// The tests' small config (recipe layer): a tiny run on write_synthetic_idx_dataset's data; and what the
// resume tests share (the weights to compare, a callback that interrupts a run).
#pragma once

#include <filesystem>

#include "recipe/config.h"
#include "test_util.h"
#include "trainer/trainer.h"

namespace stoker::testing {

// A small, fast config for training on write_synthetic_idx_dataset's data.
Config tiny_config(const std::filesystem::path& data_root, const std::filesystem::path& run_dir);

// Copies of every parameter and buffer of the trainer's model, in module order.
std::vector<torch::Tensor> weights(Trainer& t);

// Stops the trainer after a given optimizer step (an interruption, for the resume tests).
struct StopAtStep : Callback {
  explicit StopAtStep(int64_t s) : step(s) {}
  void on_train_step_end(Trainer& t, const StepInfo& info) override {
    if (info.step == step) t.request_stop();
  }
  int64_t step;
};

}  // namespace stoker::testing
