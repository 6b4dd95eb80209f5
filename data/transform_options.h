// The options of each transform type, and the transform registry: each type declares its own keys
// (with defaults and checks) for `data.train_transforms` / `data.eval_transforms` entries:
//   random_resized_crop {size, scale: [lo, hi], ratio: [lo, hi]}   (torchvision semantics)
//   resize {size}                  shorter side to `size`
//   center_crop {size}
//   random_crop {size, padding}    zero padding on each side, then a random size x size crop
//   horizontal_flip {p}
//   rand_augment {ops, magnitude, magnitude_std, num_magnitude_bins, p} or {policy: rand-m9-n2-mstd0.5}
//   trivial_augment_wide {num_magnitude_bins}      (pixel transforms: data/auto_augment.h)
// Each registry entry gives the type's options and builds its Transform (data/transforms.h) from
// them; applications register their own the same way:
//   transform_registry().add("my_blur", {options_of<MyBlurOptions>(), [](const TypedOptions& o) {
//     return std::make_shared<MyBlur>(o.as<MyBlurOptions>().radius); }});
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/options.h"
#include "common/registry.h"
#include "data/transforms.h"

namespace stoker::data {

// A transform whose output is `size` pixels (on the shorter side or square); `size` is required.
template <typename Derived>
struct SizedOptions : TypeOptionsOf<Derived> {
  int64_t size = 0;
  void visit_size(OptionsVisitor& v) { v.field("size", size, rules::at_least(1)); }
  void check_size(const char* type) const;
};

struct RandomResizedCropOptions : SizedOptions<RandomResizedCropOptions> {
  std::vector<double> scale{0.08, 1.0};
  std::vector<double> ratio{3.0 / 4.0, 4.0 / 3.0};
  void visit(OptionsVisitor& v) override;
  void check() const override;
};
struct ResizeOptions : SizedOptions<ResizeOptions> {
  void visit(OptionsVisitor& v) override { visit_size(v); }
  void check() const override { check_size("resize"); }
};
struct CenterCropOptions : SizedOptions<CenterCropOptions> {
  void visit(OptionsVisitor& v) override { visit_size(v); }
  void check() const override { check_size("center_crop"); }
};
struct RandomCropOptions : SizedOptions<RandomCropOptions> {
  int64_t padding = 0;
  void visit(OptionsVisitor& v) override;
  void check() const override { check_size("random_crop"); }
};
struct HorizontalFlipOptions : TypeOptionsOf<HorizontalFlipOptions> {
  double p = 0.5;
  void visit(OptionsVisitor& v) override { v.field("p", p, rules::unit_closed()); }
};

struct RandAugmentOptions : TypeOptionsOf<RandAugmentOptions> {
  std::string policy;  // timm's form, e.g. "rand-m9-n2-mstd0.5"; sets ops, magnitude, magnitude_std, p
  int64_t ops = 2;
  double magnitude = 9;
  double magnitude_std = 0;
  int64_t num_magnitude_bins = 31;
  double p = 1.0;
  void visit(OptionsVisitor& v) override;
  void check() const override;
};
struct TrivialAugmentWideOptions : TypeOptionsOf<TrivialAugmentWideOptions> {
  int64_t num_magnitude_bins = 31;
  void visit(OptionsVisitor& v) override { v.field("num_magnitude_bins", num_magnitude_bins, rules::at_least(2)); }
};

// Builds a transform from its (checked) options.
using TransformFactory = std::function<std::shared_ptr<const Transform>(const TypedOptions&)>;

// A registered transform type: its options and how to build it from them.
struct TransformType {
  OptionsMaker options;
  TransformFactory create;
};
Registry<TransformType>& transform_registry();

// A transform of a registered type with its default options, e.g. for building lists in code:
//   make_transform("center_crop").as<CenterCropOptions>().size = 224;
TypedOptions make_transform(const std::string& type);

// The transforms `transforms` describe, in order: each one's options checked (check()), then built by
// its registered type. An error names the transform by position and type: "transforms[1]
// (center_crop): center_crop needs a 'size' (pixels)".
TransformPipeline make_transform_pipeline(const std::vector<TypedOptions>& transforms);

}  // namespace stoker::data
