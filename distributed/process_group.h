// The processes of a data-parallel run as one c10d process group: a TCPStore for the rendezvous
// (hosted by rank 0, or by torchrun's agent when TORCHELASTIC_USE_AGENT_STORE=True, when every rank
// connects as a client), Gloo on the CPU, NCCL on CUDA (when built with it). The c10d types stay in
// process_group.cpp: this header needs only libtorch's tensor headers.
//
//   const distributed::LaunchInfo launch = distributed::launch_info_from_environment();
//   auto group = distributed::ProcessGroup::join(launch, device);
//   std::shared_ptr<distributed::DataParallel> dp = group->data_parallel(model);  // rank 0's weights everywhere
//   // or ZeRO-1: gradients reduce-scattered, each rank's optimizer updates its pieces only
//   std::shared_ptr<distributed::ShardedDataParallel> zero = group->sharded_data_parallel(model);
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/types.h>

#include "distributed/data_parallel.h"
#include "distributed/launch.h"

namespace stoker::distributed {

struct ProcessGroupOptions {
  // The longest wait for the rendezvous and for any collective; a rank whose peer died or hangs
  // fails with an error after at most this long (usually at once, when the peer's socket closes).
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
  // c10d::Reducer's gradient buckets, as PyTorch's DistributedDataParallel sizes them.
  int64_t bucket_bytes = 25 * 1024 * 1024;
  int64_t first_bucket_bytes = 1024 * 1024;
  // Every rank's heartbeat in the rendezvous store, once a second, on a thread of its own: a rank
  // whose heartbeat stops for this long (killed, frozen, its node lost), or that left a failure
  // report, aborts the group's collectives here, so that the others stop with an error naming it
  // instead of waiting for the collective timeout (NCCL's blocked kernels notice nothing of a dead
  // peer). Training threads that are merely slow keep beating. 0: no watchdog. On for NCCL; Gloo
  // notices a dead peer at once (its socket closes), so there it is off unless set.
  // The watchdog runs on its own store connection (distributed/watchdog.h), started once every rank
  // has joined. When the abort does not end this process's wait (Gloo has none; an NCCL communicator
  // being set up ignores it), it ends the process `abort_grace` later, with the reason and exit status
  // 1 (0: never); `end_process` replaces that ending (tests).
  std::chrono::milliseconds peer_timeout = std::chrono::seconds(60);
  bool watch_peers_on_gloo = false;
  std::chrono::milliseconds abort_grace = std::chrono::seconds(30);
  std::function<void(const std::string&)> end_process;

  // Benchmarks only (bench/dist_sync_bench.cpp, through TrainRequest::process_group): "overlap" (the Reducer,
  // as above), "after_backward" (one all-reduce of all gradients once backward has returned: what
  // the Reducer's overlap is measured against) or "none" (no gradient sync at all: the ranks train
  // apart, wrong for training, the compute-only baseline). ZeRO-1's buckets (sharded_data_parallel)
  // read it the same way: reduce-scattered as backward fills them, all once it has returned, or not.
  std::string grad_sync = "overlap";

};

class ProcessGroup {
 public:
  // Joins the group that `launch` describes, for training on `device` (NCCL for CUDA devices, Gloo
  // for the CPU), and ends with one small all-reduce, so that the backend's communicators are set up
  // while every rank is known to be alive (NCCL otherwise sets them up at the first collective, where
  // a rank that failed before it leaves the others in a set-up no abort can end: issue 33, G17); the
  // peer watchdog starts then. Errors say which step failed (store, backend), with the address and
  // what to check.
  static std::shared_ptr<ProcessGroup> join(const LaunchInfo& launch, torch::Device device,
                                            ProcessGroupOptions options = {});
  ~ProcessGroup();

  int64_t rank() const;
  int64_t world_size() const;
  const std::string& backend() const;  // "gloo" or "nccl"

  // Data parallelism over `model`: its parameters and buffers are broadcast from rank 0 here (every
  // rank then starts from the same weights), and a c10d::Reducer is set over its trainable
  // parameters (buckets in reverse order of definition, all-reduced as backward fills them).
  // The model must stay alive and keep its parameters while the result is in use.
  std::shared_ptr<DataParallel> data_parallel(torch::nn::Module& model);
  // ZeRO-1 data parallelism over `model` (distributed/data_parallel.h ShardedDataParallel): rank 0's
  // weights and buffers broadcast here, then the trainable parameters (and their gradients) moved into
  // flat buckets, each rank owning 1/N of every bucket. The model must stay alive while it is in use.
  std::shared_ptr<ShardedDataParallel> sharded_data_parallel(torch::nn::Module& model);
  // The tensor collectives over the group (SyncBatchNorm's statistics, say).
  std::shared_ptr<Collectives> collectives();

  // Waits until every rank got here.
  void barrier();

  // Rank 0's `text` on every rank (the others' `text` is ignored), through the rendezvous store: for
  // decisions one rank makes for all (train.precision: auto). `name` keys it; every rank calls it
  // with the same name, once. Waits at most the group's timeout for rank 0.
  std::string broadcast_text(const std::string& name, const std::string& text);

  // After this rank failed with `message`: leaves it in the rendezvous store, where the other ranks'
  // explain_lost_peer finds it (best effort: quietly nothing when the store is gone).
  void report_failure(const std::string& message);
  // After a collective failed here for a lost connection: which rank stopped first and why, as a
  // sentence ("rank 1 failed: ...", "rank 1 stopped without a word (...)"), from the reports the
  // other ranks left in the store, waiting at most `wait` for the ranks that have not reported.
  std::string explain_lost_peer(std::chrono::milliseconds wait = std::chrono::seconds(5));
  // What the peer watchdog found ("rank 1 stopped answering: no heartbeat for 61 s ..."), once it
  // aborted the group; nothing before.
  std::optional<std::string> lost_peer() const;

 private:
  struct Impl;
  explicit ProcessGroup(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker::distributed
