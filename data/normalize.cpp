// The data pipeline's normalisation (see normalize.h).
#include "data/normalize.h"

#include <ATen/Parallel.h>
#include <fmt/ranges.h>

#include "common/error.h"

namespace stoker::data {
namespace {

// uint8 [B, H, W, C] -> float, (x - mean) * inv_std per channel, in one pass over the pixels, as
// NCHW-contiguous or channels-last (the same memory order as the input) float [B, C, H, W].
torch::Tensor normalise_on_cpu(const torch::Tensor& images_in, const std::vector<float>& mean,
                               const std::vector<float>& inv_std, bool channels_last) {
  const torch::Tensor images = images_in.contiguous();
  const int64_t b = images.size(0), h = images.size(1), w = images.size(2), c = images.size(3);
  const auto format = channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
  torch::Tensor out = torch::empty({b, c, h, w}, torch::TensorOptions().dtype(torch::kFloat32).memory_format(format));
  const uint8_t* src = images.data_ptr<uint8_t>();
  float* dst = out.data_ptr<float>();
  const int64_t plane = h * w;
  at::parallel_for(0, b, 1, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const uint8_t* in = src + n * plane * c;
      float* o = dst + n * plane * c;
      if (channels_last || c == 1) {
        for (int64_t i = 0; i < plane; ++i) {
          for (int64_t k = 0; k < c; ++k) o[i * c + k] = (float(in[i * c + k]) - mean[k]) * inv_std[k];
        }
      } else {
        for (int64_t k = 0; k < c; ++k) {
          float* ok = o + k * plane;
          const float m = mean[k], s = inv_std[k];
          for (int64_t i = 0; i < plane; ++i) ok[i] = (float(in[i * c + k]) - m) * s;
        }
      }
    }
  });
  return out;
}

}  // namespace

Normalizer::Normalizer(int64_t channels, const NormalizeOptions& o) {
  STOKER_CHECK(static_cast<int64_t>(o.mean.size()) == channels && static_cast<int64_t>(o.std.size()) == channels,
               "images have {} channel(s) but normalisation has {} mean and {} std values; give one "
               "per channel",
               channels, o.mean.size(), o.std.size());
  for (int64_t c = 0; c < channels; ++c) {
    STOKER_CHECK(o.std[c] > 0, "normalisation std[{}] must be positive, got {}", c, o.std[c]);
    folded_.mean.push_back(static_cast<float>(o.mean[c] * 255.0));
    folded_.inv_std.push_back(static_cast<float>(1.0 / (o.std[c] * 255.0)));
  }
  STOKER_CHECK(o.dtype == torch::kFloat32 || o.dtype == torch::kBFloat16 || o.dtype == torch::kFloat16,
               "the input dtype must be float32, bfloat16 or float16, got {}", c10::toString(o.dtype));
  folded_.dtype = o.dtype;
  folded_.channels_last = o.channels_last;
}

torch::Tensor Normalizer::operator()(const torch::Tensor& images) const {
  STOKER_CHECK(images.dim() == 4 && images.scalar_type() == torch::kUInt8 &&
                   images.size(3) == static_cast<int64_t>(folded_.mean.size()),
               "normalisation takes uint8 [B, H, W, {}] images, got {} [{}]", folded_.mean.size(),
               c10::toString(images.scalar_type()), fmt::join(images.sizes(), ", "));
  if (!images.device().is_cpu()) return kernels::preprocess_images(images, folded_);
  torch::Tensor out = normalise_on_cpu(images, folded_.mean, folded_.inv_std, folded_.channels_last);
  return folded_.dtype == torch::kFloat32 ? out : out.to(folded_.dtype);
}

}  // namespace stoker::data
