// RandAugment and TrivialAugmentWide: pixel transforms (data/transforms.h) that apply randomly
// chosen ops of data/augment_ops.h to each sample, with torchvision.transforms.v2's op lists,
// magnitude tables and draws:
//
//   RandAugment (transform `rand_augment`): `ops` times, an op drawn uniformly from the 14 of
//     torchvision's RandAugment (Identity, ShearX/Y 0..0.3, TranslateX/Y 0..150/331 of the width or
//     height, Rotate 0..30 degrees, Brightness/Color/Contrast/Sharpness 0..0.9, Posterize 8..4 bits,
//     Solarize threshold 1..0, AutoContrast, Equalize), applied at magnitude bin `magnitude` of
//     `num_magnitude_bins` (31: bin 30 is each op's maximum), negated with probability 1/2 where the
//     op is signed. Two additions, off by default:
//       magnitude_std  timm's magnitude noise: each op's bin is drawn from N(magnitude, std) and
//                      clipped to [0, bins - 1] (timm clips to [0, 10] on its scale); a bin that is
//                      not an integer interpolates the op's range linearly.
//       p              each drawn op is applied with probability p (timm's RandAugment uses 0.5).
//     The timm form `policy: rand-m9-n2-mstd0.5-inc1` sets them on timm's 0..10 magnitude scale:
//     magnitude = m * (bins - 1) / 10 (the same fraction of each op's maximum), magnitude_std = mstd *
//     (bins - 1) / 10, ops = n (default 2), p = p (default 0.5, timm's). Only timm's "increasing" op
//     set has an equivalent here (torchvision's list is that set, with Identity in place of timm's
//     Invert and SolarizeAdd), so inc must be 1; mmax and w are not supported.
//   TrivialAugmentWide (transform `trivial_augment_wide`): one op drawn uniformly from the same 14
//     with the wide ranges (Shear 0..0.99, Translate 0..32 pixels, Rotate 0..135 degrees, enhance
//     0..0.99, Posterize 8..2 bits, Solarize 1..0), at a bin drawn uniformly from the
//     `num_magnitude_bins`, signed as above.
#pragma once

#include <cstdint>
#include <string>

#include "data/transforms.h"

namespace stoker::data {

enum class AugmentSpace { kRandAugment, kTrivialAugmentWide };

// torchvision's magnitudes_fn(bins, height, width)[bin] for `op` in `space` (the op's unsigned
// magnitude; 0 for the ops without one), in float32 as torch.linspace makes it. A fractional `bin`
// (magnitude noise) interpolates linearly.
double augment_magnitude(AugmentSpace space, AugmentOp op, double bin, int64_t bins, int64_t height,
                         int64_t width);

struct RandAugmentSettings {
  int64_t ops = 2;
  double magnitude = 9;       // a bin of num_magnitude_bins
  double magnitude_std = 0;   // in bins
  int64_t num_magnitude_bins = 31;
  double p = 1.0;             // probability of applying each drawn op
};

// The settings a timm RandAugment string ("rand-m9-n2-mstd0.5-inc1") stands for with `bins`
// magnitude bins (see above). Throws naming the part it does not take.
RandAugmentSettings parse_timm_rand_augment(const std::string& policy, int64_t bins);

class RandAugment : public PixelTransform {
 public:
  explicit RandAugment(RandAugmentSettings settings);
  void apply(PixelView image, SampleRng& rng) const override;
  const RandAugmentSettings& settings() const { return settings_; }

 private:
  RandAugmentSettings settings_;
};

class TrivialAugmentWide : public PixelTransform {
 public:
  explicit TrivialAugmentWide(int64_t num_magnitude_bins = 31);
  void apply(PixelView image, SampleRng& rng) const override;

 private:
  int64_t bins_;
};

}  // namespace stoker::data
