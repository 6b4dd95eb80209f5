// A run's part in data-parallel training: from the launcher's environment (distributed/launch.h) and
// run.distributed to the joined process group, the device of this rank, and the data shard the
// config then names (data.shard_rank / data.shard_count are set here, from the process group, so
// that global_batch_size and the linear learning-rate scaling count every rank).
//
//   Config config = ...;
//   const Distributed distributed = start_distributed(config);   // one process: world_size 1
//   TrainingSetup setup = make_training(config, distributed);    // gradients synchronised
//   if (distributed.writes()) ...                                 // rank 0 writes the run directory
#pragma once

#include <cstdint>
#include <memory>

#include <torch/types.h>

#include "distributed/process_group.h"
#include "recipe/config.h"

namespace stoker {

struct Distributed {
  std::shared_ptr<distributed::ProcessGroup> group;  // empty: one process
  distributed::LaunchInfo launch;
  torch::Device device = torch::kCPU;  // run.device resolved; cuda:<local rank> on CUDA
  int64_t rank() const { return group ? group->rank() : 0; }
  int64_t world_size() const { return group ? group->world_size() : 1; }
  // Only rank 0 writes the run directory, the log file, metrics and checkpoints.
  bool writes() const { return rank() == 0; }
};

// Resolves run.device and, when run.distributed is auto and the launcher's environment names a world
// size > 1, joins the process group (Gloo on the CPU, NCCL on CUDA), sets config.data.shard_rank and
// shard_count from it (refusing them in the config), and turns this rank's console log down to
// warnings and errors, prefixed with the rank, unless it is rank 0.
// `options`: the process group's (timeouts; benchmarks compare its gradient-sync variants).
Distributed start_distributed(Config& config, const distributed::ProcessGroupOptions& options = {});
Distributed start_distributed(Config& config, const distributed::LaunchInfo& launch,
                              const distributed::ProcessGroupOptions& options = {});

}  // namespace stoker
