// CPU transforms on uint8 images, as objects that compose. The built-in ones (their options and
// registry entries are in data/transform_options.h):
//   RandomResizedCrop {size, scale: [lo, hi], ratio: [lo, hi]}   (torchvision semantics)
//   Resize {size}                  shorter side to `size`
//   CenterCrop {size}
//   RandomCrop {size, padding}     zero padding on each side, then a random size x size crop
//   HorizontalFlip {p}
// and the pixel transforms RandAugment and TrivialAugmentWide (data/auto_augment.h).
// A pipeline of transforms is first *planned* per sample from the image size alone (which part of
// the source, what output size, flipped or not): each transform narrows or rescales a PlanView. A
// JPEG decoder can then decode only that region, at a reduced DCT scale where it can; and the plan
// is *applied* to the decoded pixels once, writing straight into the sample's slot of a batch
// buffer. Randomness comes from a per-sample seed (data/random.h).
//
// Pixel transforms (PixelTransform: RandAugment, TrivialAugmentWide) change the pixels, not the
// plan: they come after every geometric transform in the list, and run in their list order on the
// planned output, in place (TransformPipeline::apply_pixels), each drawing from its own stream of
// the sample's seed.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "data/augment_ops.h"
#include "data/decode.h"
#include "data/random.h"

namespace stoker::data {

// What to do with one sample: take `region` of the source (it may reach outside the image: that part
// is zero), resample it to out_height x out_width, and mirror it when `flip`.
struct SamplePlan {
  Region region;
  int64_t out_height = 0, out_width = 0;
  bool flip = false;
};

// A plan under construction: a region of the source in floating point, the logical size it has
// become after the transforms so far, and the flip.
struct PlanView {
  double x = 0, y = 0, w = 0, h = 0;  // source region
  double lw = 0, lh = 0;              // logical width and height
  bool flip = false;

  static PlanView of_image(int64_t height, int64_t width);
  // Narrows the view to the logical rectangle (lx, ly, cw, ch), which becomes out_w x out_h.
  void crop(double lx, double ly, double cw, double ch, double out_w, double out_h);
};

// One transform: how it changes the plan of a sample.
class Transform {
 public:
  virtual ~Transform() = default;
  // Narrows, rescales or flips `view`. `rng` is null when only the output size is asked for:
  // random transforms then make their middle (or no) choice.
  virtual void plan(PlanView& view, SampleRng* rng) const = 0;
};

// A transform of the pixels of the planned output (uint8 HWC, in place); it leaves the plan alone.
class PixelTransform : public Transform {
 public:
  void plan(PlanView&, SampleRng*) const final {}
  virtual void apply(PixelView image, SampleRng& rng) const = 0;
};

class Resize : public Transform {
 public:
  explicit Resize(int64_t size);
  void plan(PlanView& view, SampleRng* rng) const override;

 private:
  int64_t size_;
};

class CenterCrop : public Transform {
 public:
  explicit CenterCrop(int64_t size);
  void plan(PlanView& view, SampleRng* rng) const override;

 private:
  int64_t size_;
};

class RandomCrop : public Transform {
 public:
  RandomCrop(int64_t size, int64_t padding);
  void plan(PlanView& view, SampleRng* rng) const override;

 private:
  int64_t size_, padding_;
};

class RandomResizedCrop : public Transform {
 public:
  // scale and ratio: {low, high}.
  RandomResizedCrop(int64_t size, std::pair<double, double> scale, std::pair<double, double> ratio);
  void plan(PlanView& view, SampleRng* rng) const override;

 private:
  int64_t size_;
  std::pair<double, double> scale_, ratio_;
};

class HorizontalFlip : public Transform {
 public:
  explicit HorizontalFlip(double p);
  void plan(PlanView& view, SampleRng* rng) const override;

 private:
  double p_;
};

// Transforms applied in order.
class TransformPipeline {
 public:
  TransformPipeline() = default;
  explicit TransformPipeline(std::vector<std::shared_ptr<const Transform>> transforms);

  // The output size {height, width} for a source of height x width (deterministic).
  std::pair<int64_t, int64_t> output_size(int64_t height, int64_t width) const;
  // True when every source size gives the same output size (the pipeline ends in a fixed crop).
  bool fixed_output() const;
  SamplePlan plan(int64_t height, int64_t width, SampleRng& rng) const;
  size_t size() const { return transforms_.size(); }
  bool has_pixel_transforms() const { return !pixel_.empty(); }
  // Runs the pixel transforms, in order, on `image` (a planned output), transform i drawing from
  // SampleRng(mix_seed(seed, kPixelStream, i)) where `seed` is the one plan() drew from.
  void apply_pixels(PixelView image, uint64_t seed) const;

  static constexpr uint64_t kPixelStream = 0x504958454cull;  // "PIXEL"

 private:
  std::vector<std::shared_ptr<const Transform>> transforms_;
  std::vector<std::pair<size_t, const PixelTransform*>> pixel_;  // (position in the list, transform)
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
