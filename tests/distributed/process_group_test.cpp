// distributed/process_group.h with two Gloo ranks as two threads of this process, the peer watchdog on
// (ProcessGroupOptions::watch_peers_on_gloo) with a short timeout: what issue 33's G17 and G18 were; a
// rank that never joins (issue 41); and, on a GPU, an NCCL group shut down at a normal end.
#include "distributed/process_group.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "test_util.h"

namespace stoker::distributed {
namespace {

using namespace std::chrono_literals;

LaunchInfo rank_of_two(int64_t rank, int port) {
  LaunchInfo launch;
  launch.launcher = "torchrun";
  launch.rank = rank;
  launch.local_rank = rank;
  launch.world_size = 2;
  launch.master_addr = "127.0.0.1";
  launch.master_port = port;
  return launch;
}

// Records the watchdog's end of the process instead of ending it.
struct Ending {
  std::mutex mutex;
  std::condition_variable cv;
  std::optional<std::string> why;
  void end(const std::string& w) {
    std::lock_guard<std::mutex> lock(mutex);
    why = w;
    cv.notify_all();
  }
  bool wait(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex);
    return cv.wait_for(lock, timeout, [&] { return why.has_value(); });
  }
};

ProcessGroupOptions watched(Ending& ending, std::chrono::milliseconds peer_timeout) {
  ProcessGroupOptions o;
  o.timeout = 60s;
  o.peer_timeout = peer_timeout;
  o.watch_peers_on_gloo = true;
  o.abort_grace = 1s;
  o.end_process = [&ending](const std::string& why) { ending.end(why); };
  return o;
}

// G18: rank 0 is slow to its first exchange (here 5 s in a precision trial before it hands its decision
// out through the store; NCCL's set-up waits for rank 0 the same way) while rank 1 waits for it in a
// store get. The watchdog's heartbeats go over a connection of their own, so rank 1 keeps beating and
// a healthy job is neither aborted nor a live rank blamed (the heartbeats queued behind the get
// stopped for the 5 s, over the 2 s timeout).
TEST(ProcessGroupGloo, ASlowRankZeroDoesNotSilenceTheOthersHeartbeats) {
  const int port = testing::free_port();
  Ending ending;
  auto one = std::async(std::launch::async, [&] {
    auto group = ProcessGroup::join(rank_of_two(1, port), torch::kCPU, watched(ending, 2s));
    const std::string decision = group->broadcast_text("precision", "");
    group->barrier();
    return std::make_pair(decision, group->lost_peer());
  });
  auto group = ProcessGroup::join(rank_of_two(0, port), torch::kCPU, watched(ending, 2s));
  std::this_thread::sleep_for(5s);
  group->broadcast_text("precision", "bf16-mixed");
  group->barrier();
  const auto [decision, lost_one] = one.get();
  EXPECT_EQ(decision, "bf16-mixed");
  EXPECT_FALSE(group->lost_peer().has_value()) << *group->lost_peer();
  EXPECT_FALSE(lost_one.has_value()) << *lost_one;
  EXPECT_FALSE(ending.why.has_value()) << *ending.why;
}

// G17: rank 1 fails after joining and before the first collective (its data folder is missing) while
// its connections stay open, as an NCCL rank's do: rank 0's collective would wait for it until the
// timeout. The watchdog reads rank 1's report and aborts; Gloo's abort unblocks nothing (nor does
// NCCL's during a communicator's set-up), so after abort_grace the watchdog ends the process, naming
// rank 1. (Here the end is recorded, and rank 1 then takes part so that the barrier returns.)
TEST(ProcessGroupGloo, ARankThatFailsBeforeTheFirstCollectiveEndsTheOthers) {
  const int port = testing::free_port();
  Ending ending;
  std::promise<void> ended;
  auto one = std::async(std::launch::async, [&, done = ended.get_future()]() mutable {
    auto group = ProcessGroup::join(rank_of_two(1, port), torch::kCPU, watched(ending, 30s));
    group->report_failure("image folder /data/missing/train does not exist");
    done.wait();
    group->barrier();
  });
  auto group = ProcessGroup::join(rank_of_two(0, port), torch::kCPU, watched(ending, 30s));
  const auto start = std::chrono::steady_clock::now();
  auto blocked = std::async(std::launch::async, [&] { group->barrier(); });
  const bool ended_in_time = ending.wait(10s);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ended.set_value();
  blocked.get();
  one.get();
  ASSERT_TRUE(ended_in_time) << "the watchdog did not end the process";
  EXPECT_LT(seconds, 5.0);
  EXPECT_CONTAINS(*ending.why, "rank 0: rank 1 failed: image folder /data/missing/train does not exist; aborting "
                               "the collectives did not end the wait for them within 1 s");
}

// Issue 41: a rank that never joins (it failed before: a checkpoint missing on its node) is named by
// the others within the group's timeout, at the store, before any backend call; before, rank 0 waited in
// the backend's set-up (NCCL's bootstrap: no timeout of ours) and Gloo's error named no rank.
TEST(ProcessGroupGloo, ARankThatNeverJoinsIsNamedWithinTheTimeout) {
  ProcessGroupOptions o;
  o.timeout = 2s;
  LaunchInfo launch = rank_of_two(0, testing::free_port());
  launch.world_size = 3;
  const auto start = std::chrono::steady_clock::now();
  const std::string message = testing::error_of([&] { ProcessGroup::join(launch, torch::kCPU, o); });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_CONTAINS(message, "rank 0 of 3: ranks 1, 2 did not join within 2 s (the process group's timeout)");
  EXPECT_CONTAINS(message, "they failed or stopped before joining");
  EXPECT_LT(seconds, 30.0);
}

// NCCL at a normal end: the group is shut down, so NCCL's "process group has NOT been destroyed"
// warning is not printed (PyTorch prints it at every exit of a group never destroyed).
TEST(ProcessGroupGpu, ANcclGroupIsShutDownAtANormalEnd) {
  STOKER_NEEDS_CUDA();
  const torch::Device gpu(torch::kCUDA, 0);
  LaunchInfo launch = rank_of_two(0, testing::free_port());
  launch.world_size = 1;
  ::testing::internal::CaptureStderr();
  {
    auto group = ProcessGroup::join(launch, gpu);
    EXPECT_EQ(group->backend(), "nccl");
    group->barrier();
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.find("NOT been destroyed"), std::string::npos) << err;
}

}  // namespace
}  // namespace stoker::distributed
