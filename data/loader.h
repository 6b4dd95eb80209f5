// The batch loader for in-memory image sets (IDX today): shuffles each epoch from the seed,
// augments on uint8 (random crop with zero padding, horizontal flip), copies the uint8 batch to the
// training device and only there converts it to normalised float (4x fewer bytes over the bus).
// Randomness is a pure function of (seed, epoch, sample index), so batch b of epoch e is the same
// whether it is built first or after a resume.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/types.h>

#include "data/idx.h"

namespace stoker::data {

struct LoaderOptions {
  int64_t batch_size = 128;
  bool shuffle = true;
  bool drop_last = true;
  uint64_t seed = 0;
  int64_t random_crop_padding = 0;  // pad each side with zeros, then crop back to size at random
  bool horizontal_flip = false;     // flip each sample with probability 1/2
  std::vector<double> mean{0.0};    // per channel, on the 0..1 scale
  std::vector<double> std{1.0};
  bool channels_last = false;       // hand out inputs in channels-last memory format
  torch::Device device = torch::kCPU;
};

struct Batch {
  torch::Tensor input;   // float, [B, C, H, W], normalised, on the device
  torch::Tensor target;  // int64, [B], on the device
  int64_t size() const { return target.size(0); }
};

class InMemoryLoader {
 public:
  InMemoryLoader(ImageSet set, LoaderOptions options);

  int64_t num_batches() const;
  int64_t num_samples() const { return set_.size(); }
  const LoaderOptions& options() const { return options_; }

  // Fixes the sample order of `epoch` (a fresh shuffle per epoch when shuffling).
  void set_epoch(int64_t epoch);
  // Builds batch `index` (0 <= index < num_batches()) of the current epoch.
  Batch batch(int64_t index) const;

 private:
  void augment_into(int64_t sample, int64_t slot, uint8_t* out) const;

  ImageSet set_;
  LoaderOptions options_;
  int64_t epoch_ = 0;
  std::vector<int64_t> order_;
  torch::Tensor mean_, inv_std_;  // [1, C, 1, 1] on the device
};

// A 64-bit mix of its inputs (splitmix64 finaliser), the root of all per-sample randomness.
uint64_t mix_seed(uint64_t seed, uint64_t a, uint64_t b = 0);

}  // namespace stoker::data
