// A run's part in data-parallel training: from the launcher's environment (distributed/launch.h) and
// run.distributed to the joined process group and the device of this rank. The rank and the world
// size reach the data layer as derived context (recipe/loaders.h DataRanks -> data::LoaderContext)
// and the batch arithmetic as an argument (batch_arithmetic(config, world_size), held by the run's
// plan), never as the user's data.shard_* keys, which stay for sharding by hand (run.distributed: off).
//
//   Config config = ...;
//   const Distributed distributed = start_distributed(config);   // one process: world_size 1
//   TrainingSetup setup = make_training(resolve_plan(config, distributed), distributed);
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
// size > 1, joins the process group (Gloo on the CPU, NCCL on CUDA; data.shard_rank / shard_count
// in the config are refused then: the process group shards the data), and turns this rank's console
// log down to warnings and errors, prefixed with the rank, unless it is rank 0.
// The CUDA device index a rank trains on, among the `visible_devices` it sees: its local rank, or 0
// when it sees a single device (a launcher that gives each task its own GPU, as Slurm's
// --gpus-per-task does); more local ranks than devices is an error saying what to start.
int64_t rank_device_index(const distributed::LaunchInfo& launch, int64_t visible_devices);

// `options`: the process group's (timeouts; benchmarks compare its gradient-sync variants).
Distributed start_distributed(Config& config, const distributed::ProcessGroupOptions& options = {});
Distributed start_distributed(Config& config, const distributed::LaunchInfo& launch,
                              const distributed::ProcessGroupOptions& options = {});

}  // namespace stoker
