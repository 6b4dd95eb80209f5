// The launcher of the fused preprocessing kernel (kernels/preprocess.cu): raw pointers and sizes
// only, no torch, so that nvcc compiles it quickly. kernels/preprocess.cpp checks the tensors and
// calls it; nothing else should.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace stoker::kernels::detail {

constexpr int kMaxChannels = 16;  // = kPreprocessMaxKernelChannels (preprocess.h)

enum class OutType : int { kFloat32, kBFloat16, kFloat16 };

struct PreprocessLaunch {
  const uint8_t* src = nullptr;   // [B, H, W, C] contiguous, on the device
  void* dst = nullptr;            // [B, C, H, W] of out_type: NCHW-contiguous or channels-last
  const uint8_t* flip = nullptr;  // [B] (0 = keep, else mirror), on the device; null = no flip
  int64_t batch = 0, height = 0, width = 0, channels = 0;
  float mean[kMaxChannels] = {};
  float inv_std[kMaxChannels] = {};
  OutType out_type = OutType::kFloat32;
  bool channels_last = false;
};

// Enqueues the kernel on `stream` and returns the launch status (cudaGetLastError after the
// launch); the caller turns a failure into an error. Expects 1 <= channels <= kMaxChannels and
// batch * height * width > 0.
cudaError_t launch_preprocess(const PreprocessLaunch& p, cudaStream_t stream);

}  // namespace stoker::kernels::detail
