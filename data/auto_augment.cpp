// RandAugment and TrivialAugmentWide (see auto_augment.h).
#include "data/auto_augment.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "common/error.h"

namespace stoker::data {

namespace {

enum class Range { kNone, kLinear, kTranslateWidth, kTranslateHeight, kPosterize, kSolarize };

struct OpRange {
  Range range;
  double hi;  // kLinear: the end of linspace(0, hi); kTranslate*: a fraction or pixels; kPosterize: the divisor
  bool is_signed;
};

// torchvision's _AUGMENTATION_SPACE of RandAugment and TrivialAugmentWide, in AugmentOp order.
const OpRange& op_range(AugmentSpace space, AugmentOp op) {
  static const OpRange rand_augment[kAugmentOpCount] = {
      {Range::kNone, 0, false},           {Range::kLinear, 0.3, true},
      {Range::kLinear, 0.3, true},        {Range::kTranslateWidth, 150.0 / 331.0, true},
      {Range::kTranslateHeight, 150.0 / 331.0, true}, {Range::kLinear, 30.0, true},
      {Range::kLinear, 0.9, true},        {Range::kLinear, 0.9, true},
      {Range::kLinear, 0.9, true},        {Range::kLinear, 0.9, true},
      {Range::kPosterize, 4, false},      {Range::kSolarize, 0, false},
      {Range::kNone, 0, false},           {Range::kNone, 0, false}};
  static const OpRange trivial_wide[kAugmentOpCount] = {
      {Range::kNone, 0, false},           {Range::kLinear, 0.99, true},
      {Range::kLinear, 0.99, true},       {Range::kLinear, 32.0, true},
      {Range::kLinear, 32.0, true},       {Range::kLinear, 135.0, true},
      {Range::kLinear, 0.99, true},       {Range::kLinear, 0.99, true},
      {Range::kLinear, 0.99, true},       {Range::kLinear, 0.99, true},
      {Range::kPosterize, 6, false},      {Range::kSolarize, 0, false},
      {Range::kNone, 0, false},           {Range::kNone, 0, false}};
  const int i = static_cast<int>(op);
  return space == AugmentSpace::kRandAugment ? rand_augment[i] : trivial_wide[i];
}

// torch.linspace(start, end, steps)[i] in float32 (ATen's CPU kernel: from the start up to half way,
// from the end after, each a fused multiply-add as its build compiles it), or the linear
// interpolation for a fractional i.
double linspace_at(double start, double end, int64_t steps, double i) {
  if (i != std::floor(i)) return start + (end - start) * i / double(steps - 1);
  const auto k = static_cast<int64_t>(i);
  const float s = float(start), e = float(end);
  const float step = (e - s) / float(steps - 1);
  return k < steps / 2 ? double(std::fma(step, float(k), s)) : double(std::fma(-step, float(steps - k - 1), e));
}

// Box-Muller: a standard normal draw.
double gaussian(SampleRng& rng) {
  const double u1 = 1.0 - rng.uniform(), u2 = rng.uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * 3.14159265358979323846 * u2);
}

// Draws an op's sign (when signed) and applies it at `bin`.
void apply_at(PixelView image, AugmentSpace space, AugmentOp op, double bin, int64_t bins, SampleRng& rng) {
  const OpRange& r = op_range(space, op);
  double m = augment_magnitude(space, op, bin, bins, image.height, image.width);
  if (r.range != Range::kNone && r.is_signed && rng.uniform() < 0.5) m = -m;
  apply_augment_op(image, op, m);
}

}  // namespace

double augment_magnitude(AugmentSpace space, AugmentOp op, double bin, int64_t bins, int64_t height,
                         int64_t width) {
  const OpRange& r = op_range(space, op);
  switch (r.range) {
    case Range::kNone: return 0.0;
    case Range::kLinear: return linspace_at(0.0, r.hi, bins, bin);
    case Range::kTranslateWidth: return linspace_at(0.0, r.hi * double(width), bins, bin);
    case Range::kTranslateHeight: return linspace_at(0.0, r.hi * double(height), bins, bin);
    case Range::kSolarize: return linspace_at(1.0, 0.0, bins, bin);
    case Range::kPosterize: {  // (8 - arange(bins) / ((bins - 1) / hi)).round().int()
      const float q = float(bin) / float(double(bins - 1) / r.hi);
      return std::nearbyint(8.0f - q);
    }
  }
  return 0.0;
}

RandAugmentSettings parse_timm_rand_augment(const std::string& policy, int64_t bins) {
  RandAugmentSettings s;
  s.num_magnitude_bins = bins;
  s.magnitude = double(bins - 1);  // timm's default m10
  s.p = 0.5;
  const double scale = double(bins - 1) / 10.0;
  size_t at = 0;
  bool first = true;
  while (at <= policy.size()) {
    const size_t dash = std::min(policy.find('-', at), policy.size());
    const std::string part = policy.substr(at, dash - at);
    at = dash + 1;
    if (first) {
      STOKER_CHECK(part == "rand", "policy '{}': a timm RandAugment string starts with 'rand-', as in "
                   "rand-m9-n2-mstd0.5", policy);
      first = false;
      continue;
    }
    const size_t digit = part.find_first_of("0123456789.");
    const std::string key = part.substr(0, digit);
    char* end = nullptr;
    const double value = digit == std::string::npos ? NAN : std::strtod(part.c_str() + digit, &end);
    STOKER_CHECK(digit != std::string::npos && end != nullptr && *end == '\0' && std::isfinite(value) &&
                     value >= 0,
                 "policy '{}': '{}' is not a key followed by a non-negative number", policy, part);
    if (key == "m") {
      STOKER_CHECK(value <= 10, "policy '{}': m must be in [0, 10] (timm's scale), got {}", policy, value);
      s.magnitude = value * scale;
    } else if (key == "n") {
      s.ops = static_cast<int64_t>(value);
    } else if (key == "mstd") {
      STOKER_CHECK(value <= 100, "policy '{}': mstd over 100 (timm's uniform magnitude) is not supported", policy);
      s.magnitude_std = value * scale;
    } else if (key == "p") {
      STOKER_CHECK(value <= 1, "policy '{}': p must be in [0, 1], got {}", policy, value);
      s.p = value;
    } else if (key == "inc") {
      STOKER_CHECK(value == 1, "policy '{}': only inc1 is supported (torchvision's op set is timm's "
                   "increasing one)", policy);
    } else {
      STOKER_FAIL("policy '{}': '{}' is not supported; the parts taken are m, n, mstd, p and inc1", policy, key);
    }
  }
  return s;
}

RandAugment::RandAugment(RandAugmentSettings settings) : settings_(settings) {
  const auto& s = settings_;
  STOKER_CHECK(s.num_magnitude_bins >= 2, "rand_augment: num_magnitude_bins must be >= 2, got {}",
               s.num_magnitude_bins);
  STOKER_CHECK(s.ops >= 0, "rand_augment: ops must be >= 0, got {}", s.ops);
  STOKER_CHECK(s.magnitude >= 0 && s.magnitude <= double(s.num_magnitude_bins - 1),
               "rand_augment: magnitude must be a bin in [0, num_magnitude_bins - 1] = [0, {}], got {}",
               s.num_magnitude_bins - 1, s.magnitude);
  STOKER_CHECK(s.magnitude_std >= 0 && std::isfinite(s.magnitude_std),
               "rand_augment: magnitude_std must be >= 0, got {}", s.magnitude_std);
  STOKER_CHECK(s.p >= 0 && s.p <= 1, "rand_augment: p must be in [0, 1], got {}", s.p);
}

void RandAugment::apply(PixelView image, SampleRng& rng) const {
  const auto& s = settings_;
  for (int64_t k = 0; k < s.ops; ++k) {
    const auto op = static_cast<AugmentOp>(rng.integer(0, kAugmentOpCount - 1));
    if (s.p < 1 && rng.uniform() >= s.p) continue;
    double bin = s.magnitude;
    if (s.magnitude_std > 0) {
      bin = std::clamp(bin + s.magnitude_std * gaussian(rng), 0.0, double(s.num_magnitude_bins - 1));
    }
    apply_at(image, AugmentSpace::kRandAugment, op, bin, s.num_magnitude_bins, rng);
  }
}

TrivialAugmentWide::TrivialAugmentWide(int64_t num_magnitude_bins) : bins_(num_magnitude_bins) {
  STOKER_CHECK(bins_ >= 2, "trivial_augment_wide: num_magnitude_bins must be >= 2, got {}", bins_);
}

void TrivialAugmentWide::apply(PixelView image, SampleRng& rng) const {
  const auto op = static_cast<AugmentOp>(rng.integer(0, kAugmentOpCount - 1));
  const double bin = double(rng.integer(0, bins_ - 1));
  apply_at(image, AugmentSpace::kTrivialAugmentWide, op, bin, bins_, rng);
}

}  // namespace stoker::data
