// Device preprocessing of an image batch in one pass: uint8 NHWC [B, H, W, C] -> normalised
// [B, C, H, W] in float32, bfloat16 or float16, NCHW-contiguous or channels-last, with an optional
// per-sample horizontal flip. The fused CUDA kernel (kernels/preprocess.cu) and its plain ATen
// reference path live behind one function; tests/kernels/preprocess_test.cpp holds them equal.
//
//   kernels::PreprocessOptions o;
//   o.mean = {123.675f, 116.28f, 103.53f};                  // 0..255 scale
//   o.inv_std = {1 / 58.395f, 1 / 57.12f, 1 / 57.375f};     // 1 / (std * 255)
//   o.dtype = torch::kBFloat16;
//   torch::Tensor x = kernels::preprocess_images(images_u8_on_gpu, o);  // bf16 [B, 3, H, W]
#pragma once

#include <vector>

#include <torch/types.h>

namespace stoker::kernels {

struct PreprocessOptions {
  // Per channel, on the 0..255 scale of the input: out = (x - mean[c]) * inv_std[c], computed in
  // float32 and rounded once to `dtype` (round to nearest even).
  std::vector<float> mean;
  std::vector<float> inv_std;
  torch::ScalarType dtype = torch::kFloat32;  // kFloat32, kBFloat16 or kFloat16
  bool channels_last = false;                 // memory format of the [B, C, H, W] result
  // Optional bool or uint8 [B]: sample b is mirrored left-right where flip[b] != 0. On the CPU or
  // on the images' device (a mask on the CPU costs a small copy to the GPU).
  torch::Tensor flip;

  PreprocessOptions& set_mean(std::vector<float> v) { mean = std::move(v); return *this; }
  PreprocessOptions& set_dtype(torch::ScalarType v) { dtype = v; return *this; }
  PreprocessOptions& set_channels_last(bool v) { channels_last = v; return *this; }
};

// The most channels the CUDA kernel handles; more go through the reference path.
constexpr int64_t kPreprocessMaxKernelChannels = 16;

// uint8 [B, H, W, C] (any device) -> normalised [B, C, H, W] on the same device. Runs the fused
// CUDA kernel on the current CUDA stream when the images are on a GPU and Stoker was built with
// CUDA, else preprocess_images_reference. Throws stoker::Error for bad input.
torch::Tensor preprocess_images(const torch::Tensor& images_u8_nhwc, const PreprocessOptions& options);

// The same result from plain ATen ops (CPU or CUDA): the definition the kernel is tested against.
torch::Tensor preprocess_images_reference(const torch::Tensor& images_u8_nhwc, const PreprocessOptions& options);

// Whether preprocess_images has a CUDA kernel in this build (STOKER_WITH_CUDA).
bool preprocess_has_cuda_kernel();

}  // namespace stoker::kernels
