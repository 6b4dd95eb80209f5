// environment.json in a run directory: where the run ran (host, CPU and its features, GPU, libtorch,
// Stoker's commit, start time), for `trainer report` and for comparing runs across machines.
#pragma once

#include <filesystem>
#include <string>

#include <torch/types.h>

namespace stoker {

// One JSON object: host, cpu (model name), cpu_cores, device, gpu (name, when training on CUDA),
// hardware (the device's features, trainer/precision_choice.h), cpu_features (on CUDA), torch
// (libtorch's version), stoker_commit (the source tree's `git describe`, when it is a git checkout;
// "unknown" otherwise), started (UTC, ISO 8601).
std::string environment_json(torch::Device device);
// Writes environment_json to <run_dir>/environment.json (atomically).
void write_environment(const std::filesystem::path& run_dir, torch::Device device);

}  // namespace stoker
