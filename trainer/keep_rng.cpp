#include "trainer/keep_rng.h"

#include <mutex>

#include <ATen/CPUGeneratorImpl.h>

#ifdef STOKER_WITH_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif

namespace stoker {
namespace {
at::Tensor state_of(at::Generator& g) {
  std::lock_guard<std::mutex> lock(g.mutex());
  return g.get_state();
}
void restore(at::Generator& g, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(g.mutex());
  g.set_state(state);
}
}  // namespace

KeepRng::KeepRng(c10::Device device) : cpu_(at::detail::getDefaultCPUGenerator()) {
  cpu_state_ = state_of(cpu_);
#ifdef STOKER_WITH_CUDA
  if (device.is_cuda()) {
    cuda_ = at::cuda::detail::getDefaultCUDAGenerator(device.has_index() ? device.index() : 0);
    cuda_state_ = state_of(*cuda_);
  }
#else
  (void)device;
#endif
}

KeepRng::~KeepRng() {
  restore(cpu_, cpu_state_);
  if (cuda_) restore(*cuda_, cuda_state_);
}

}  // namespace stoker
