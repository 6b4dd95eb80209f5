// The tests' small config (recipe layer): a tiny run on write_synthetic_idx_dataset's data.
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

// The model.type a shipped recipe names when no model of that type is registered in this build (a
// family that another branch adds: configs/finetune_vit_b_16.yaml's vit_b_16), else "". The tests
// that load every recipe skip such a recipe and say so (skipped_recipe).
std::string unregistered_model_type(const std::filesystem::path& recipe);
// Prints why `recipe` is skipped; true when it is.
bool skipped_recipe(const std::filesystem::path& recipe);

}  // namespace stoker::testing
