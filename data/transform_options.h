// The options of each transform type, and the transform registry: each type declares its own keys
// (with defaults and checks) for `data.train_transforms` / `data.eval_transforms` entries:
//   random_resized_crop {size, scale: [lo, hi], ratio: [lo, hi]}   (torchvision semantics)
//   resize {size}                  shorter side to `size`
//   center_crop {size}
//   random_crop {size, padding}    zero padding on each side, then a random size x size crop
//   horizontal_flip {p}
// Applications register more with transform_registry().add(name, {options_of<MyOptions>()}).
#pragma once

#include <cstdint>
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

// A registered transform type.
struct TransformType {
  OptionsMaker options;
};
Registry<TransformType>& transform_registry();

// A transform of a registered type with its default options, e.g. for building lists in code:
//   make_transform("center_crop").as<CenterCropOptions>().size = 224;
TypedOptions make_transform(const std::string& type);

// The pipeline's description of a transform of one of the five built-in types.
TransformSpec to_transform_spec(const TypedOptions& transform);
std::vector<TransformSpec> to_transform_specs(const std::vector<TypedOptions>& transforms);

}  // namespace stoker::data
