#include "data/transform_options.h"

#include "common/error.h"
#include "data/auto_augment.h"

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

void RandAugmentOptions::visit(OptionsVisitor& v) {
  v.field("policy", policy, rules::described("a timm RandAugment string such as rand-m9-n2-mstd0.5"));
  v.field("ops", ops, rules::at_least(0));
  v.field("magnitude", magnitude, rules::non_negative());
  v.field("magnitude_std", magnitude_std, rules::non_negative());
  v.field("num_magnitude_bins", num_magnitude_bins, rules::at_least(2));
  v.field("p", p, rules::unit_closed());
}

void RandAugmentOptions::check() const {
  if (!policy.empty()) {
    const RandAugmentOptions defaults;
    if (ops != defaults.ops || magnitude != defaults.magnitude || magnitude_std != defaults.magnitude_std ||
        p != defaults.p) {
      STOKER_FAIL("give either 'policy' or 'ops', 'magnitude', 'magnitude_std' and 'p', not both");
    }
    parse_timm_rand_augment(policy, num_magnitude_bins);
    return;
  }
  if (magnitude > double(num_magnitude_bins - 1)) {
    STOKER_FAIL("'magnitude' is a bin in [0, num_magnitude_bins - 1] = [0, {}], got {}", num_magnitude_bins - 1,
                magnitude);
  }
}

namespace {

RandAugmentSettings rand_augment_settings(const RandAugmentOptions& o) {
  if (!o.policy.empty()) return parse_timm_rand_augment(o.policy, o.num_magnitude_bins);
  RandAugmentSettings s;
  s.ops = o.ops;
  s.magnitude = o.magnitude;
  s.magnitude_std = o.magnitude_std;
  s.num_magnitude_bins = o.num_magnitude_bins;
  s.p = o.p;
  return s;
}

std::pair<double, double> low_high(const std::vector<double>& v) { return {v.at(0), v.at(1)}; }

template <typename Options, typename Make>
TransformType entry(Make make) {
  return {options_of<Options>(), [make](const TypedOptions& t) -> std::shared_ptr<const Transform> {
            return make(t.as<Options>());
          }};
}

void add_stoker_transforms(Registry<TransformType>& r) {
  r.add("random_resized_crop", entry<RandomResizedCropOptions>([](const RandomResizedCropOptions& o) {
          return std::make_shared<RandomResizedCrop>(o.size, low_high(o.scale), low_high(o.ratio));
        }));
  r.add("resize", entry<ResizeOptions>([](const ResizeOptions& o) { return std::make_shared<Resize>(o.size); }));
  r.add("center_crop", entry<CenterCropOptions>([](const CenterCropOptions& o) {
          return std::make_shared<CenterCrop>(o.size);
        }));
  r.add("random_crop", entry<RandomCropOptions>([](const RandomCropOptions& o) {
          return std::make_shared<RandomCrop>(o.size, o.padding);
        }));
  r.add("horizontal_flip", entry<HorizontalFlipOptions>([](const HorizontalFlipOptions& o) {
          return std::make_shared<HorizontalFlip>(o.p);
        }));
  r.add("rand_augment", entry<RandAugmentOptions>([](const RandAugmentOptions& o) {
          return std::make_shared<RandAugment>(rand_augment_settings(o));
        }));
  r.add("trivial_augment_wide", entry<TrivialAugmentWideOptions>([](const TrivialAugmentWideOptions& o) {
          return std::make_shared<TrivialAugmentWide>(o.num_magnitude_bins);
        }));
}

}  // namespace

Registry<TransformType>& transform_registry() {
  return lazy_registry<TransformType, add_stoker_transforms>("transform");
}

TypedOptions make_transform(const std::string& type) {
  return TypedOptions(type, transform_registry().get(type).options());
}

TransformPipeline make_transform_pipeline(const std::vector<TypedOptions>& transforms) {
  std::vector<std::shared_ptr<const Transform>> built;
  for (size_t i = 0; i < transforms.size(); ++i) {
    const TypedOptions& t = transforms[i];
    try {
      t.options().check();
      built.push_back(transform_registry().get(t.type()).create(t));
    } catch (const Error& e) {
      STOKER_FAIL("transforms[{}] ({}): {}", i, t.type(), e.what());
    }
  }
  return TransformPipeline(std::move(built));
}

}  // namespace stoker::data
