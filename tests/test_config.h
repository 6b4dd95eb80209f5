// The tests' small config (recipe layer): a tiny run on write_synthetic_idx_dataset's data.
#pragma once

#include <filesystem>

#include "recipe/config.h"
#include "test_util.h"

namespace stoker::testing {

// A small, fast config for training on write_synthetic_idx_dataset's data.
Config tiny_config(const std::filesystem::path& data_root, const std::filesystem::path& run_dir);

}  // namespace stoker::testing
