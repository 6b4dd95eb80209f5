// Small host tensors a batch operation draws on the CPU (mixup's per-row mixing weights, random
// erasing's noise) sent to the device without the host waiting for the GPU. A plain copy from
// pageable memory waits for all the work queued before it on the stream (the previous steps), so the
// training thread would stall once per batch and the wait would look like data wait (issue 33, G16);
// from pinned memory the copy is queued like a kernel, and the caching host allocator keeps the
// pinned block until the copy has run.
#pragma once

#include <torch/types.h>

namespace stoker::data {

// `host` (a CPU tensor) as `dtype` on `device`: on a CUDA device converted on the host, copied into
// pinned memory and sent with an asynchronous copy on the current stream; elsewhere an ordinary
// conversion.
torch::Tensor to_device_async(const torch::Tensor& host, torch::Device device, torch::ScalarType dtype);

}  // namespace stoker::data
