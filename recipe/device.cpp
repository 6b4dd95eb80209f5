#include "recipe/device.h"

#include <algorithm>
#include <thread>

#include <torch/torch.h>

#include "common/error.h"

#ifdef STOKER_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace stoker {

torch::Device resolve_device(const std::string& name) {
  const bool cuda = torch::cuda::is_available();
  if (name == "auto") return cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  if (name == "cpu") return torch::kCPU;
  STOKER_CHECK(cuda, "run.device is '{}' but CUDA is not available here ({}); use run.device: auto "
               "or cpu",
               name, torch::cuda::device_count() == 0 ? "no CUDA device found" : "libtorch has no CUDA");
  torch::Device device(name);
  STOKER_CHECK(device.index() < static_cast<int>(torch::cuda::device_count()),
               "run.device is '{}' but only {} CUDA device(s) exist", name, torch::cuda::device_count());
  if (!device.has_index()) device.set_index(0);
  return device;
}

void select_device(torch::Device device) {
#ifdef STOKER_WITH_CUDA
  if (device.is_cuda()) c10::cuda::set_device(device.has_index() ? device.index() : 0);
#else
  (void)device;
#endif
}

torch::Device use_device(const std::string& name) {
  const torch::Device device = resolve_device(name);
  select_device(device);
  return device;
}

void configure_threads(int64_t threads, int64_t loader_workers, bool on_cpu) {
  const int64_t cores = std::max(1u, std::thread::hardware_concurrency());
  const int64_t n = threads > 0 ? threads : std::max<int64_t>(1, cores - (on_cpu ? loader_workers : 0));
  torch::set_num_threads(static_cast<int>(n));
  try {
    torch::set_num_interop_threads(1);
  } catch (const std::exception&) {
    // Only settable before the first parallel work; a second run in one process keeps the first.
  }
}

}  // namespace stoker
