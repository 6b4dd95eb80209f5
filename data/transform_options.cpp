#include "data/transform_options.h"

#include "common/error.h"

namespace stoker::data {

template <typename Derived>
void SizedOptions<Derived>::check_size(const char* type) const {
  if (size < 1) STOKER_FAIL("{} needs a 'size' (pixels)", type);
}

void RandomResizedCropOptions::visit(OptionsVisitor& v) {
  visit_size(v);
  v.field("scale", scale, rules::items(rules::number("a number in (0, 1]", 0, 1, true), 2, 2));
  v.field("ratio", ratio, rules::items(rules::positive(), 2, 2));
}

void RandomResizedCropOptions::check() const {
  check_size("random_resized_crop");
  if (scale[0] > scale[1] || ratio[0] > ratio[1]) {
    STOKER_FAIL("scale and ratio must be [low, high] with low <= high");
  }
}

void RandomCropOptions::visit(OptionsVisitor& v) {
  visit_size(v);
  v.field("padding", padding, rules::at_least(0));
}

Registry<TransformType>& transform_registry() {
  static Registry<TransformType>* registry = [] {
    auto* r = new Registry<TransformType>("transform");
    r->add("random_resized_crop", {options_of<RandomResizedCropOptions>()});
    r->add("resize", {options_of<ResizeOptions>()});
    r->add("center_crop", {options_of<CenterCropOptions>()});
    r->add("random_crop", {options_of<RandomCropOptions>()});
    r->add("horizontal_flip", {options_of<HorizontalFlipOptions>()});
    return r;
  }();
  return *registry;
}

TypedOptions make_transform(const std::string& type) {
  return TypedOptions(type, transform_registry().get(type).options());
}

TransformSpec to_transform_spec(const TypedOptions& t) {
  TransformSpec spec;
  spec.type = t.type();
  if (t.type() == "random_resized_crop") {
    const auto& o = t.as<RandomResizedCropOptions>();
    spec.size = o.size;
    spec.scale = o.scale;
    spec.ratio = o.ratio;
  } else if (t.type() == "resize") {
    spec.size = t.as<ResizeOptions>().size;
  } else if (t.type() == "center_crop") {
    spec.size = t.as<CenterCropOptions>().size;
  } else if (t.type() == "random_crop") {
    spec.size = t.as<RandomCropOptions>().size;
    spec.padding = t.as<RandomCropOptions>().padding;
  } else if (t.type() == "horizontal_flip") {
    spec.p = t.as<HorizontalFlipOptions>().p;
  }
  return spec;
}

std::vector<TransformSpec> to_transform_specs(const std::vector<TypedOptions>& transforms) {
  std::vector<TransformSpec> specs;
  for (const auto& t : transforms) specs.push_back(to_transform_spec(t));
  return specs;
}

}  // namespace stoker::data
