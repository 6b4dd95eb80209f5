// Process-group ranks as threads (thread_ranks.h).
#include "distributed/thread_ranks.h"

#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "test_util.h"

namespace stoker::testing {

void run_ranks(int world, const std::function<void(distributed::ProcessGroup& group)>& rank_body,
               const std::function<torch::Device(int rank)>& device,
               std::optional<distributed::ProcessGroupOptions> options) {
  if (!options) {
    options.emplace();
    options->timeout = std::chrono::seconds(60);
  }
  const int port = free_port();
  std::mutex mutex;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        distributed::LaunchInfo launch;
        launch.launcher = "torchrun";
        launch.rank = r;
        launch.world_size = world;
        launch.master_port = port;
        auto group = distributed::ProcessGroup::join(launch, device ? device(r) : torch::Device(torch::kCPU), *options);
        rank_body(*group);
        group->barrier();  // no rank's group goes while another still talks to it
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!first) first = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace stoker::testing
