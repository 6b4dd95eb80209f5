// The ranks of one process group as threads of a test process (Gloo over 127.0.0.1, or NCCL with one
// GPU per rank), for the tests of the collectives, the ZeRO-1 buckets, SyncBatchNorm and the sharded
// optimizer without starting programs. Each rank builds its own modules: the threads share the
// process's random generators, so whatever draws random numbers is made before run_ranks or seeded.
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include <torch/types.h>

#include "distributed/process_group.h"

namespace stoker::testing {

// Runs `rank_body(group)` on `world` threads, rank r's group joined on `device(r)` (the CPU: Gloo;
// cuda:r: NCCL) with `options` (a timeout of a minute unless given); waits for all and rethrows the
// first exception a rank threw.
void run_ranks(int world, const std::function<void(distributed::ProcessGroup& group)>& rank_body,
               const std::function<torch::Device(int rank)>& device = nullptr,
               std::optional<distributed::ProcessGroupOptions> options = std::nullopt);

// `group` as a shared pointer that does not own it (run_ranks keeps it alive while rank_body runs), for
// what takes one (parallel::StrategyContext::group).
inline std::shared_ptr<distributed::ProcessGroup> borrowed(distributed::ProcessGroup& group) {
  return {&group, [](distributed::ProcessGroup*) {}};
}

}  // namespace stoker::testing
