#include "data/host_copy.h"

#include <torch/torch.h>

#include "common/error.h"

namespace stoker::data {

torch::Tensor to_device_async(const torch::Tensor& host, torch::Device device, torch::ScalarType dtype) {
  STOKER_CHECK(host.is_cpu(), "to_device_async copies host tensors, got one on {}", host.device().str());
  if (!device.is_cuda()) return host.to(device, dtype);
  // Converted first: a copy that also converts goes through a pageable temporary.
  const torch::Tensor pinned = host.to(dtype).contiguous().pin_memory();
  return pinned.to(device, dtype, /*non_blocking=*/true);
}

}  // namespace stoker::data
