// The tests' small config (recipe layer): a tiny run on write_synthetic_idx_dataset's data.
#pragma once

#include <filesystem>

#include "recipe/config.h"
#include "test_util.h"

namespace stoker::testing {

// A small, fast config for training on write_synthetic_idx_dataset's data.
Config tiny_config(const std::filesystem::path& data_root, const std::filesystem::path& run_dir);

// data.batch_ops with both of Stoker's operations: pixel erasing with probability 0.5, then mixup
// (alpha 0.8) or CutMix (alpha 1.0) per sample.
std::vector<TypedOptions> erasing_and_mixup();

}  // namespace stoker::testing
