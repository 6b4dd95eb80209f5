// The run's device and threads: run.device resolved to a torch::Device, and libtorch's thread
// counts set once for the run (process-wide settings belong to the run, not to a library constructor).
#pragma once

#include <cstdint>
#include <string>

#include <torch/types.h>

namespace stoker {

// "auto" picks CUDA when available, else the CPU; "cuda"/"cuda:N" without CUDA is an error.
torch::Device resolve_device(const std::string& name);

// Makes `device` the current CUDA device of this thread (nothing on the CPU), so that nothing the
// run allocates (pinned host buffers, NCCL's communicators, the caching allocator) makes a context
// on GPU 0 when the run trains on another GPU.
void select_device(torch::Device device);

// resolve_device, then select_device: what every command that runs on the device does first (a run,
// eval, predict, bench-data), so that none of them touches GPU 0 when run.device names another.
torch::Device use_device(const std::string& name);

// Sets libtorch's intra-op thread count and a single inter-op thread. `threads` = 0 picks one per
// core, less the loader's workers when training on the CPU, so that the two do not oversubscribe it.
void configure_threads(int64_t threads, int64_t loader_workers = 0, bool on_cpu = true);

}  // namespace stoker
