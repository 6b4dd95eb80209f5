// CPU transforms on uint8 images, composed from YAML:
//   random_resized_crop {size, scale: [lo, hi], ratio: [lo, hi]}   (torchvision semantics)
//   resize {size}                  shorter side to `size`
//   center_crop {size}
//   random_crop {size, padding}    zero padding on each side, then a random size x size crop
//   horizontal_flip {p}
// A pipeline is first *planned* per sample from the image size alone (which part of the source, what
// output size, flipped or not), so that a JPEG decoder can decode only that region, at a reduced
// DCT scale where it can; then the plan is *applied* to the decoded pixels, writing straight into
// the sample's slot of a batch buffer. Randomness comes from a per-sample seed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/decode.h"

namespace stoker::data {

struct TransformSpec {
  std::string type;  // random_resized_crop | resize | center_crop | random_crop | horizontal_flip
  int64_t size = 0;
  std::vector<double> scale{0.08, 1.0};
  std::vector<double> ratio{3.0 / 4.0, 4.0 / 3.0};
  int64_t padding = 0;
  double p = 0.5;
};

// What to do with one sample: take `region` of the source (it may reach outside the image: that part
// is zero), resample it to out_height x out_width, and mirror it when `flip`.
struct SamplePlan {
  Region region;
  int64_t out_height = 0, out_width = 0;
  bool flip = false;
};

// One splitmix64 step: a 64-bit mix of `x` (the root of every per-sample random number).
uint64_t splitmix64(uint64_t x);

// A small, fast per-sample random generator (splitmix64).
class SampleRng {
 public:
  explicit SampleRng(uint64_t seed) : state_(seed) {}
  uint64_t next();
  double uniform();                        // [0, 1)
  int64_t integer(int64_t lo, int64_t hi);  // [lo, hi]

 private:
  uint64_t state_;
};

class TransformPipeline {
 public:
  TransformPipeline() = default;
  // Checks each spec (names the bad one and why) and keeps them.
  explicit TransformPipeline(std::vector<TransformSpec> specs, const std::string& where = "transforms");

  // The output size for a source of height x width (deterministic).
  std::pair<int64_t, int64_t> output_size(int64_t height, int64_t width) const;
  // True when every source size gives the same output size (the pipeline ends in a fixed crop).
  bool fixed_output() const;
  SamplePlan plan(int64_t height, int64_t width, SampleRng& rng) const;
  const std::vector<TransformSpec>& specs() const { return specs_; }

 private:
  std::vector<TransformSpec> specs_;
};

// Writes `plan` applied to the source into `out` (out_height x out_width x channels, HWC).
// `decoded` holds `decoded_region` of the source, possibly scaled (its size says by how much).
// Uses OpenCV's resize (bilinear; area when shrinking more than 2x) where sizes differ, and copies
// rows where they do not.
void apply_plan(const Image& decoded, const Region& decoded_region, const SamplePlan& plan,
                uint8_t* out);

// The part of the source a plan needs, clipped to the image (what to decode).
Region needed_region(const SamplePlan& plan, int64_t height, int64_t width);

}  // namespace stoker::data
