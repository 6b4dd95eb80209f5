#include "data/random_erasing.h"

#include <cmath>

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include "common/error.h"
#include "data/host_copy.h"
#include "data/random.h"

namespace stoker::data {
namespace {

constexpr uint64_t kErasingSalt = 0x6572617365ull;  // "erase"
constexpr int kTries = 10;                           // timm's attempts per rectangle

double uniform_in(SampleRng& rng, double lo, double hi) { return lo + (hi - lo) * rng.uniform(); }

// The fill of one rectangle of `c` channels, on the CPU in float32 from the generator.
torch::Tensor fill_of(const std::string& mode, int64_t c, const EraseRect& r, at::Generator& gen) {
  if (mode == "pixel") return at::normal(0.0, 1.0, {c, r.height, r.width}, gen);
  if (mode == "rand") return at::normal(0.0, 1.0, {c, 1, 1}, gen);
  return torch::zeros({c, 1, 1});
}

}  // namespace

void RandomErasingSettings::visit(OptionsVisitor& v) {
  using namespace rules;
  v.field("probability", probability, unit_closed());
  v.field("mode", mode, one_of({"const", "rand", "pixel"}));
  v.field("min_area", min_area, number("a share in (0, 1]", 0, 1, true));
  v.field("max_area", max_area, number("a share in (0, 1]", 0, 1, true));
  v.field("min_aspect", min_aspect, positive());
  v.field("max_aspect", max_aspect, non_negative());
  v.field("min_count", min_count, at_least(1));
  v.field("max_count", max_count, at_least(0));
}

void RandomErasingSettings::check() const {
  STOKER_CHECK(enabled(), "random_erasing does nothing with probability 0; set a probability (e.g. 0.25) or leave "
               "the operation out");
  STOKER_CHECK(mode == "const" || mode == "rand" || mode == "pixel",
               "mode must be const, rand or pixel, got '{}'", mode);
  STOKER_CHECK(min_area <= max_area, "min_area ({}) must not exceed max_area ({})", min_area,
               max_area);
  const double hi = max_aspect > 0 ? max_aspect : 1.0 / min_aspect;
  STOKER_CHECK(min_aspect <= hi, "min_aspect ({}) must not exceed max_aspect ({}{})", min_aspect, hi,
               max_aspect > 0 ? "" : ", which 0 makes 1 / min_aspect; set max_aspect or a min_aspect <= 1");
  STOKER_CHECK(max_count == 0 || max_count >= min_count,
               "max_count ({}) must be at least min_count ({}), or 0 for min_count", max_count,
               min_count);
}

std::string RandomErasingSettings::describe() const {
  const int64_t most = max_count > 0 ? max_count : min_count;
  return fmt::format("probability {:g} per sample, {} fill, {}{} rectangle(s) of {:g}..{:g} of the area", probability,
                     mode, min_count, most > min_count ? fmt::format("..{}", most) : "", min_area, max_area);
}

uint64_t erasing_sample_seed(uint64_t seed, int64_t epoch, int64_t position) {
  return mix_seed(seed ^ kErasingSalt, static_cast<uint64_t>(epoch) + 1, static_cast<uint64_t>(position));
}

std::vector<EraseRect> draw_erasing(const RandomErasingSettings& s, int64_t height, int64_t width,
                                    uint64_t sample_seed) {
  SampleRng rng(sample_seed);
  std::vector<EraseRect> out;
  if (rng.uniform() >= s.probability) return out;
  const int64_t max_count = s.max_count > 0 ? s.max_count : s.min_count;
  const int64_t count = rng.integer(s.min_count, max_count);
  const double log_lo = std::log(s.min_aspect);
  const double log_hi = std::log(s.max_aspect > 0 ? s.max_aspect : 1.0 / s.min_aspect);
  const double area = static_cast<double>(height * width);
  for (int64_t k = 0; k < count; ++k) {
    for (int attempt = 0; attempt < kTries; ++attempt) {
      const double target = uniform_in(rng, s.min_area, s.max_area) * area / static_cast<double>(count);
      const double aspect = std::exp(uniform_in(rng, log_lo, log_hi));
      // Python's round(): half to even, as nearbyint in the default rounding mode.
      const auto h = static_cast<int64_t>(std::nearbyint(std::sqrt(target * aspect)));
      const auto w = static_cast<int64_t>(std::nearbyint(std::sqrt(target / aspect)));
      if (w < width && h < height) {
        EraseRect r;
        r.height = h;
        r.width = w;
        r.top = rng.integer(0, height - h);
        r.left = rng.integer(0, width - w);
        out.push_back(r);
        break;
      }
    }
  }
  return out;
}

torch::Tensor apply_erasing(const std::string& mode, const torch::Tensor& input,
                            const std::vector<std::vector<EraseRect>>& rects,
                            const std::vector<uint64_t>& sample_seeds) {
  STOKER_CHECK(input.dim() == 4 && static_cast<int64_t>(rects.size()) == input.size(0) &&
                   sample_seeds.size() == rects.size(),
               "random_erasing (data.batch_ops): expected a normalised [B, C, H, W] batch and one list of rectangles and one "
               "seed per sample, got {}, {} and {}",
               fmt::format("[{}]", fmt::join(input.sizes(), ", ")), rects.size(), sample_seeds.size());
  bool any = false;
  for (const auto& r : rects) any = any || !r.empty();
  if (!any) return input;
  // Every fill made on the CPU from its sample's generator, then one copy to the device for all, from
  // pinned memory so that the host does not wait for the steps queued before it (host_copy.h).
  const int64_t channels = input.size(1);
  std::vector<torch::Tensor> fills;
  for (size_t i = 0; i < rects.size(); ++i) {
    if (rects[i].empty()) continue;
    at::Generator gen = at::detail::createCPUGenerator(splitmix64(sample_seeds[i]));
    for (const EraseRect& r : rects[i]) fills.push_back(fill_of(mode, channels, r, gen));
  }
  std::vector<torch::Tensor> flat;
  for (const torch::Tensor& f : fills) flat.push_back(f.reshape({-1}));
  const torch::Tensor all = to_device_async(torch::cat(flat), input.device(), input.scalar_type());
  torch::Tensor out = input.clone();
  int64_t offset = 0;
  size_t k = 0;
  for (size_t i = 0; i < rects.size(); ++i) {
    for (const EraseRect& r : rects[i]) {
      const torch::Tensor fill = all.narrow(0, offset, fills[k].numel()).view(fills[k].sizes());
      offset += fills[k++].numel();
      out[static_cast<int64_t>(i)]
          .slice(1, r.top, r.top + r.height)
          .slice(2, r.left, r.left + r.width)
          .copy_(fill.expand({channels, r.height, r.width}));
    }
  }
  return out;
}

}  // namespace stoker::data
