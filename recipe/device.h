// The run's device and threads: run.device resolved to a torch::Device, and libtorch's thread
// counts set once for the run (process-wide settings belong to the run, not to a library constructor).
#pragma once

#include <cstdint>
#include <string>

#include <torch/types.h>

namespace stoker {

// "auto" picks CUDA when available, else the CPU; "cuda"/"cuda:N" without CUDA is an error.
torch::Device resolve_device(const std::string& name);

// Sets libtorch's intra-op thread count and a single inter-op thread. `threads` = 0 picks one per
// core, less the loader's workers when training on the CPU, so that the two do not oversubscribe it.
void configure_threads(int64_t threads, int64_t loader_workers = 0, bool on_cpu = true);

}  // namespace stoker
