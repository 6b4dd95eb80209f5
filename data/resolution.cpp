#include "data/resolution.h"

#include <cmath>

#include <fmt/format.h>

#include "common/error.h"
#include "data/transform_options.h"

namespace stoker::data {

void ResolutionSchedule::check() const {
  if (!enabled()) return;
  STOKER_CHECK(start_size >= 1 && end_size >= 1, "start_size ({}) and end_size ({}) must both be at least 1 pixel",
               start_size, end_size);
  STOKER_CHECK(step >= 1 && step <= std::min(start_size, end_size),
               "step ({}) must be at least 1 and at most the smaller size ({})", step, std::min(start_size, end_size));
  STOKER_CHECK(start_epoch >= 0 && end_epoch >= start_epoch,
               "start_epoch ({}) must be at least 0 and end_epoch ({}) at least start_epoch", start_epoch, end_epoch);
}

int64_t ResolutionSchedule::size_at(int64_t epoch) const {
  if (epoch <= start_epoch) return start_size;
  if (epoch >= end_epoch) return end_size;
  const double t = static_cast<double>(epoch - start_epoch) / static_cast<double>(end_epoch - start_epoch);
  const double interpolated = static_cast<double>(start_size) + t * static_cast<double>(end_size - start_size);
  // std::nearbyint in the default rounding mode rounds halves to even, as np.round in FFCV does.
  return static_cast<int64_t>(std::nearbyint(interpolated / static_cast<double>(step))) * step;
}

std::string ResolutionSchedule::describe(int64_t epochs) const {
  std::string out;
  int64_t first = 0;
  for (int64_t e = 1; e <= epochs; ++e) {
    if (e < epochs && size_at(e) == size_at(first)) continue;
    if (!out.empty()) out += ", ";
    out += e - 1 == first ? fmt::format("{} (epoch {})", size_at(first), first + 1)
                          : fmt::format("{} (epochs {}-{})", size_at(first), first + 1, e);
    first = e;
  }
  return out;
}

namespace {

// The size of a transform that has one (the built-in sized types), else null; `crop`: it is a crop.
int64_t* size_field(TypedOptions& t, bool& crop) {
  TypeOptions& o = t.options();
  crop = true;
  if (auto* c = dynamic_cast<RandomResizedCropOptions*>(&o)) return &c->size;
  if (auto* c = dynamic_cast<RandomCropOptions*>(&o)) return &c->size;
  if (auto* c = dynamic_cast<CenterCropOptions*>(&o)) return &c->size;
  crop = false;
  if (auto* r = dynamic_cast<ResizeOptions*>(&o)) return &r->size;
  return nullptr;
}

// The position of the transform that decides the output size: the last crop, else the last resize;
// -1 when there is none.
int64_t deciding_transform(std::vector<TypedOptions>& transforms) {
  int64_t last_resize = -1;
  for (int64_t i = static_cast<int64_t>(transforms.size()) - 1; i >= 0; --i) {
    bool crop = false;
    if (size_field(transforms[i], crop) == nullptr) continue;
    if (crop) return i;
    if (last_resize < 0) last_resize = i;
  }
  return last_resize;
}

}  // namespace

int64_t output_size_of(const std::vector<TypedOptions>& transforms) {
  std::vector<TypedOptions> copy = transforms;
  const int64_t at = deciding_transform(copy);
  bool crop = false;
  return at < 0 ? 0 : *size_field(copy[at], crop);
}

std::vector<TypedOptions> with_output_size(const std::vector<TypedOptions>& transforms, int64_t size,
                                           const std::string& key) {
  STOKER_CHECK(size >= 1, "{}: the output size must be at least 1 pixel, not {}", key, size);
  std::vector<TypedOptions> out = transforms;
  const int64_t at = deciding_transform(out);
  STOKER_CHECK(at >= 0,
               "{} has no transform whose size can be set (random_resized_crop, random_crop, center_crop or resize); "
               "add one, e.g. {{type: random_resized_crop, size: {}}}",
               key, size);
  bool crop = false;
  int64_t& target = *size_field(out[at], crop);
  const double scale = target > 0 ? static_cast<double>(size) / static_cast<double>(target) : 1.0;
  for (int64_t i = 0; i < at; ++i) {
    if (int64_t* s = size_field(out[i], crop)) *s = std::max<int64_t>(1, std::llround(static_cast<double>(*s) * scale));
  }
  target = size;
  return out;
}

}  // namespace stoker::data
