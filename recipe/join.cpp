// Joining a data-parallel run (join.h).
#include "recipe/join.h"

#include <torch/torch.h>

#include "common/error.h"
#include "common/log.h"
#include "recipe/device.h"

namespace stoker {

int64_t rank_device_index(const distributed::LaunchInfo& launch, int64_t visible_devices) {
  // Slurm (--gpus-per-task, --gpu-bind) and some launchers give each task its own GPU: the task sees
  // one device, whatever its local rank. Otherwise the local rank indexes the node's devices.
  if (visible_devices == 1) return 0;
  STOKER_CHECK(launch.local_rank < visible_devices,
               "rank {} is local rank {} on its node, but it sees only {} CUDA device(s); start at most one "
               "process per GPU (--nproc-per-node), or give each process one GPU of its own (CUDA_VISIBLE_DEVICES)",
               launch.rank, launch.local_rank, visible_devices);
  return launch.local_rank;
}

Distributed start_distributed(Config& config, const distributed::ProcessGroupOptions& options) {
  return start_distributed(config, distributed::launch_info_from_environment(), options);
}

Distributed start_distributed(Config& config, const distributed::LaunchInfo& launch,
                              const distributed::ProcessGroupOptions& options) {
  Distributed d;
  d.launch = launch;
  d.device = resolve_device(config.run.device);
  if (config.run.distributed == "off" || !launch.distributed()) return d;
  STOKER_CHECK(config.data.shard_count == 1 && config.data.shard_rank == 0,
               "data.shard_rank / data.shard_count are set ({} of {}) but {} launched {} processes: under a "
               "launcher the process group decides each rank's shard; remove them from the config (or set "
               "run.distributed: off to shard by hand)",
               config.data.shard_rank, config.data.shard_count, launch.launcher, launch.world_size);
  if (d.device.is_cuda()) {
    const int64_t index = rank_device_index(launch, static_cast<int64_t>(torch::cuda::device_count()));
    d.device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
    select_device(d.device);  // before the process group: NCCL and every allocation use it
  }
  if (launch.rank != 0) {
    logger().set_level(config.logging.sample_digests ? spdlog::level::info : spdlog::level::warn);
    logger().set_pattern(fmt::format("[%H:%M:%S] [rank {}] %^%l%$ %v", launch.rank));
  }
  d.group = distributed::ProcessGroup::join(launch, d.device, options);
  logger().info("distributed: rank {} of {} ({}, {} backend, store at {}:{}); every rank trains on its "
                "shard of each epoch, rank 0 writes the run directory",
                launch.rank, launch.world_size, launch.launcher, d.group->backend(), launch.master_addr,
                launch.master_port);
  return d;
}

}  // namespace stoker
