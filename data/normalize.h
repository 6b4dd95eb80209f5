// The one normalisation of the data pipeline: a uint8 NHWC batch, as the sample pipeline builds it,
// becomes the model's input, (x / 255 - mean) / std per channel as float32, bfloat16 or float16
// [B, C, H, W] (NCHW-contiguous or channels-last). On a GPU it is the fused kernel
// (kernels/preprocess.h); on the CPU one threaded pass over the pixels. The Loader uses it for every
// batch, `trainer predict` for its images.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/types.h>

#include "kernels/preprocess.h"

namespace stoker::data {

struct NormalizeOptions {
  std::vector<double> mean{0.0};  // per channel, 0..1 scale
  std::vector<double> std{1.0};
  // float32, or bfloat16 / float16 (normalised in float32, then rounded once).
  torch::ScalarType dtype = torch::kFloat32;
  bool channels_last = false;  // memory format of the result

  NormalizeOptions& set_mean(std::vector<double> v) { mean = std::move(v); return *this; }
  NormalizeOptions& set_std(std::vector<double> v) { std = std::move(v); return *this; }
  NormalizeOptions& set_dtype(torch::ScalarType v) { dtype = v; return *this; }
  NormalizeOptions& set_channels_last(bool v) { channels_last = v; return *this; }
};

class Normalizer {
 public:
  Normalizer() = default;
  // Checks the options for images of `channels` channels (one mean and one positive std each).
  Normalizer(int64_t channels, const NormalizeOptions& options);

  // uint8 [B, H, W, C] on the CPU or a GPU -> normalised [B, C, H, W] on the same device. On a GPU
  // it runs on the current stream.
  torch::Tensor operator()(const torch::Tensor& images_u8_nhwc) const;
  // The folded form the kernel takes: mean * 255 and 1 / (std * 255) per channel, dtype, layout.
  const kernels::PreprocessOptions& folded() const { return folded_; }

 private:
  kernels::PreprocessOptions folded_;
};

}  // namespace stoker::data
