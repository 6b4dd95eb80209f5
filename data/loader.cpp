#include "data/loader.h"

#include <cstring>

#include <torch/torch.h>

#include "common/error.h"

namespace stoker::data {

uint64_t mix_seed(uint64_t seed, uint64_t a, uint64_t b) {
  auto splitmix = [](uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  };
  return splitmix(splitmix(splitmix(seed) ^ a) ^ b);
}

InMemoryLoader::InMemoryLoader(ImageSet set, LoaderOptions options)
    : set_(std::move(set)), options_(std::move(options)) {
  STOKER_CHECK(set_.images.defined() && set_.images.dim() == 4 &&
                   set_.images.scalar_type() == torch::kUInt8 && set_.images.is_contiguous(),
               "{}: expected contiguous uint8 images [N, C, H, W]", set_.source);
  STOKER_CHECK(set_.labels.size(0) == set_.images.size(0), "{}: {} images but {} labels",
               set_.source, set_.images.size(0), set_.labels.size(0));
  STOKER_CHECK(options_.batch_size > 0, "batch size must be positive, got {}", options_.batch_size);
  STOKER_CHECK(set_.size() > 0, "{}: the data set is empty", set_.source);
  const int64_t channels = set_.images.size(1);
  STOKER_CHECK(static_cast<int64_t>(options_.mean.size()) == channels &&
                   static_cast<int64_t>(options_.std.size()) == channels,
               "{}: images have {} channel(s) but normalisation has {} mean and {} std values; give "
               "one per channel",
               set_.source, channels, options_.mean.size(), options_.std.size());
  std::vector<float> mean, inv_std;
  for (int64_t c = 0; c < channels; ++c) {
    STOKER_CHECK(options_.std[c] > 0, "normalisation std[{}] must be positive, got {}", c,
                 options_.std[c]);
    // Inputs are uint8 0..255; fold the 1/255 into the affine transform.
    mean.push_back(static_cast<float>(options_.mean[c] * 255.0));
    inv_std.push_back(static_cast<float>(1.0 / (options_.std[c] * 255.0)));
  }
  mean_ = torch::tensor(mean).view({1, channels, 1, 1}).to(options_.device);
  inv_std_ = torch::tensor(inv_std).view({1, channels, 1, 1}).to(options_.device);
  STOKER_CHECK(!options_.drop_last || set_.size() >= options_.batch_size,
               "{}: {} samples are fewer than one batch of {} with drop_last; lower the batch size",
               set_.source, set_.size(), options_.batch_size);
  set_epoch(0);
}

int64_t InMemoryLoader::num_batches() const {
  const int64_t n = set_.size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

void InMemoryLoader::set_epoch(int64_t epoch) {
  epoch_ = epoch;
  order_.resize(set_.size());
  for (int64_t i = 0; i < set_.size(); ++i) order_[i] = i;
  if (!options_.shuffle) return;
  // Fisher-Yates with our own generator: the order depends only on (seed, epoch).
  uint64_t state = mix_seed(options_.seed, 0x5348554646ull /* "SHUFF" */, epoch);
  for (int64_t i = set_.size() - 1; i > 0; --i) {
    state = mix_seed(state, i);
    const int64_t j = static_cast<int64_t>(state % static_cast<uint64_t>(i + 1));
    std::swap(order_[i], order_[j]);
  }
}

void InMemoryLoader::augment_into(int64_t sample, int64_t slot, uint8_t* out) const {
  const int64_t c = set_.images.size(1), h = set_.images.size(2), w = set_.images.size(3);
  const uint8_t* src = set_.images.data_ptr<uint8_t>() + sample * c * h * w;
  uint8_t* dst = out + slot * c * h * w;
  const int64_t pad = options_.random_crop_padding;
  if (pad == 0 && !options_.horizontal_flip) {
    std::memcpy(dst, src, c * h * w);
    return;
  }
  // Per-sample randomness from (seed, epoch, sample).
  const uint64_t r = mix_seed(options_.seed, static_cast<uint64_t>(epoch_) + 1, sample);
  const int64_t dy = pad ? static_cast<int64_t>(r % (2 * pad + 1)) - pad : 0;
  const int64_t dx = pad ? static_cast<int64_t>((r >> 16) % (2 * pad + 1)) - pad : 0;
  const bool flip = options_.horizontal_flip && ((r >> 40) & 1);
  // Output pixel (y, x) reads source (y + dy, x' + dx) where x' is x or its mirror; outside is 0.
  for (int64_t ch = 0; ch < c; ++ch) {
    for (int64_t y = 0; y < h; ++y) {
      uint8_t* row = dst + (ch * h + y) * w;
      const int64_t sy = y + dy;
      if (sy < 0 || sy >= h) {
        std::memset(row, 0, w);
        continue;
      }
      const uint8_t* srow = src + (ch * h + sy) * w;
      for (int64_t x = 0; x < w; ++x) {
        const int64_t sx = (flip ? (w - 1 - x) : x) + dx;
        row[x] = (sx >= 0 && sx < w) ? srow[sx] : 0;
      }
    }
  }
}

Batch InMemoryLoader::batch(int64_t index) const {
  STOKER_CHECK(index >= 0 && index < num_batches(), "batch index {} out of range [0, {})", index,
               num_batches());
  const int64_t begin = index * options_.batch_size;
  const int64_t end = std::min(begin + options_.batch_size, set_.size());
  const int64_t b = end - begin;
  const auto& im = set_.images;
  torch::Tensor input = torch::empty({b, im.size(1), im.size(2), im.size(3)}, torch::kUInt8);
  torch::Tensor target = torch::empty({b}, torch::kInt64);
  uint8_t* out = input.data_ptr<uint8_t>();
  int64_t* tgt = target.data_ptr<int64_t>();
  const int64_t* labels = set_.labels.data_ptr<int64_t>();
  for (int64_t slot = 0; slot < b; ++slot) {
    const int64_t sample = order_[begin + slot];
    augment_into(sample, slot, out);
    tgt[slot] = labels[sample];
  }
  Batch batch;
  // uint8 to the device, float conversion and normalisation there.
  batch.input = input.to(options_.device).to(torch::kFloat32).sub_(mean_).mul_(inv_std_);
  if (options_.channels_last) {
    batch.input = batch.input.contiguous(torch::MemoryFormat::ChannelsLast);
  }
  batch.target = target.to(options_.device);
  return batch;
}

}  // namespace stoker::data
