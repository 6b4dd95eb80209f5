#include "data/mixup.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include "common/error.h"
#include "data/host_copy.h"

namespace stoker::data {
namespace {

// A salt that keeps the batch draws apart from the per-sample ones of the same (seed, epoch, index).
constexpr uint64_t kMixupSalt = 0x6d69787570ull;  // "mixup"

double normal_sample(SampleRng& rng) {  // Box-Muller
  const double u1 = 1.0 - rng.uniform();  // (0, 1]
  const double u2 = rng.uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

// Gamma(shape, 1), Marsaglia and Tsang (2000); shape < 1 through Gamma(shape + 1) * U^(1 / shape).
double gamma_sample(SampleRng& rng, double shape) {
  if (shape < 1.0) return gamma_sample(rng, shape + 1.0) * std::pow(1.0 - rng.uniform(), 1.0 / shape);
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  while (true) {
    double x = 0, v = 0;
    do {
      x = normal_sample(rng);
      v = 1.0 + c * x;
    } while (v <= 0);
    v = v * v * v;
    const double u = 1.0 - rng.uniform();
    if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v;
  }
}

// timm's rand_bbox_minmax: sides drawn uniformly in [min, max) of the image's, the box inside it.
CutBox minmax_box(SampleRng& rng, int64_t height, int64_t width, const std::vector<double>& minmax) {
  auto side = [&](int64_t size) {
    const auto lo = static_cast<int64_t>(static_cast<double>(size) * minmax[0]);
    const auto hi = static_cast<int64_t>(static_cast<double>(size) * minmax[1]);
    return rng.integer(lo, std::max(lo, hi - 1));
  };
  const int64_t cut_h = side(height), cut_w = side(width);
  CutBox b;
  b.yl = rng.integer(0, height - cut_h);
  b.xl = rng.integer(0, width - cut_w);
  b.yh = b.yl + cut_h;
  b.xh = b.xl + cut_w;
  return b;
}

// One draw as timm's _params_per_batch (and per element): mixed with probability prob; cutmix or
// mixup; lam from the Beta distribution, corrected to the box for cutmix.
MixDraw draw_one(const MixupSettings& s, SampleRng& rng, int64_t height, int64_t width) {
  MixDraw d;
  if (rng.uniform() >= s.prob) return d;
  const bool both = s.mixup_alpha > 0 && s.cutmix_on();
  d.cutmix = both ? rng.uniform() < s.switch_prob : s.cutmix_on();
  const double cutmix_alpha = s.cutmix_minmax.empty() ? s.cutmix_alpha : 1.0;
  const double lam = beta_sample(rng, d.cutmix ? cutmix_alpha : s.mixup_alpha);
  if (!d.cutmix) {
    d.lam = lam;
    return d;
  }
  if (s.cutmix_minmax.empty()) {
    const int64_t cy = rng.integer(0, height - 1);
    const int64_t cx = rng.integer(0, width - 1);
    d.box = cutmix_box(height, width, lam, cy, cx);
  } else {
    d.box = minmax_box(rng, height, width, s.cutmix_minmax);
  }
  d.lam = box_lambda(d.box, height, width);
  return d;
}

// timm's one_hot with label smoothing: off = smoothing / C, on = 1 - smoothing + off; float32.
torch::Tensor smoothed_rows(const torch::Tensor& target, int64_t num_classes, double smoothing) {
  const double off = smoothing / static_cast<double>(num_classes);
  torch::Tensor rows = torch::full({target.size(0), num_classes}, off,
                                   torch::TensorOptions().dtype(torch::kFloat32).device(target.device()));
  return rows.scatter_(1, target.to(torch::kLong).view({-1, 1}), 1.0 - smoothing + off);
}

bool same_draw(const MixDraw& a, const MixDraw& b) {
  return a.lam == b.lam && a.cutmix == b.cutmix && a.box.yl == b.box.yl && a.box.yh == b.box.yh &&
         a.box.xl == b.box.xl && a.box.xh == b.box.xh;
}

torch::Tensor box_of(const torch::Tensor& x, const CutBox& b) {
  return x.slice(-2, b.yl, b.yh).slice(-1, b.xl, b.xh);
}

}  // namespace

void MixupSettings::visit(OptionsVisitor& v) {
  using namespace rules;
  v.field("mixup_alpha", mixup_alpha, non_negative());
  v.field("cutmix_alpha", cutmix_alpha, non_negative());
  v.field("cutmix_minmax", cutmix_minmax, items(number("a share in (0, 1]", 0, 1, true), 0, 2));
  v.field("prob", prob, unit_closed());
  v.field("switch_prob", switch_prob, unit_closed());
  v.field("mode", mode, one_of({"batch", "pair", "elem"}));
}

void MixupSettings::check() const {
  STOKER_CHECK(enabled(), "mixup does nothing with mixup_alpha and cutmix_alpha 0 and no cutmix_minmax; set "
               "mixup_alpha (e.g. 0.2), cutmix_alpha (e.g. 1.0) or both, or leave the operation out");
  if (!cutmix_minmax.empty()) {
    STOKER_CHECK(cutmix_minmax.size() == 2 && cutmix_minmax[0] < cutmix_minmax[1],
                 "cutmix_minmax must be [min, max] with min < max (shares of the image's sides, e.g. "
                 "[0.2, 0.8]), or left out");
    STOKER_CHECK(cutmix_alpha == 0 || cutmix_alpha == 1,
                 "cutmix_alpha ({}) is not used with cutmix_minmax (boxes are drawn from "
                 "the min/max range, as timm does, which takes cutmix_alpha as 1); leave it out or set 1",
                 cutmix_alpha);
  }
  STOKER_CHECK(mode == "batch" || mode == "pair" || mode == "elem",
               "mode must be batch, pair or elem, got '{}'", mode);
}

std::string MixupSettings::describe() const {
  std::string what;
  if (mixup_alpha > 0) what += fmt::format("mixup (alpha {:g})", mixup_alpha);
  if (cutmix_on()) {
    if (!what.empty()) what += fmt::format(" or, with probability {:g}, ", switch_prob);
    what += cutmix_minmax.empty() ? fmt::format("cutmix (alpha {:g})", cutmix_alpha)
                                  : fmt::format("cutmix (box sides {:g}..{:g})", cutmix_minmax[0], cutmix_minmax[1]);
  }
  return fmt::format("{}, per {} with probability {:g}", what, mode == "elem" ? "sample" : mode, prob);
}

CutBox cutmix_box(int64_t height, int64_t width, double lam, int64_t cy, int64_t cx) {
  const double ratio = std::sqrt(1.0 - lam);
  const auto cut_h = static_cast<int64_t>(static_cast<double>(height) * ratio);
  const auto cut_w = static_cast<int64_t>(static_cast<double>(width) * ratio);
  CutBox b;
  b.yl = std::clamp<int64_t>(cy - cut_h / 2, 0, height);
  b.yh = std::clamp<int64_t>(cy + (cut_h + 1) / 2, 0, height);
  b.xl = std::clamp<int64_t>(cx - cut_w / 2, 0, width);
  b.xh = std::clamp<int64_t>(cx + (cut_w + 1) / 2, 0, width);
  return b;
}

double box_lambda(const CutBox& box, int64_t height, int64_t width) {
  return 1.0 - static_cast<double>(box.area()) / static_cast<double>(height * width);
}

double beta_sample(SampleRng& rng, double alpha) {
  const double x = gamma_sample(rng, alpha);
  const double y = gamma_sample(rng, alpha);
  return x + y > 0 ? x / (x + y) : 0.5;
}

uint64_t mix_batch_seed(uint64_t seed, int64_t epoch, int64_t batch_index) {
  return mix_seed(seed ^ kMixupSalt, static_cast<uint64_t>(epoch) + 1, static_cast<uint64_t>(batch_index));
}

std::vector<MixDraw> draw_mix(const MixupSettings& s, int64_t batch, int64_t height, int64_t width, uint64_t seed) {
  SampleRng rng(seed);
  std::vector<MixDraw> draws(static_cast<size_t>(batch));
  if (s.mode == "batch") {
    std::fill(draws.begin(), draws.end(), draw_one(s, rng, height, width));
  } else if (s.mode == "pair") {
    for (int64_t i = 0; i < batch / 2; ++i) {
      draws[i] = draw_one(s, rng, height, width);
      draws[batch - 1 - i] = draws[i];
    }
  } else {
    for (auto& d : draws) d = draw_one(s, rng, height, width);
  }
  return draws;
}

std::pair<torch::Tensor, torch::Tensor> apply_mix(const std::vector<MixDraw>& draws, const torch::Tensor& input,
                                                  const torch::Tensor& target, int64_t num_classes,
                                                  double smoothing) {
  STOKER_CHECK(input.dim() == 4 && target.dim() == 1 && input.size(0) == target.size(0) &&
                   static_cast<int64_t>(draws.size()) == input.size(0),
               "mixup (data.batch_ops): expected a normalised [B, C, H, W] batch with class indices [B] and one draw per "
               "sample, got input {}, target {} and {} draw(s)",
               fmt::format("[{}]", fmt::join(input.sizes(), ", ")), fmt::format("[{}]", fmt::join(target.sizes(), ", ")),
               draws.size());
  const int64_t batch = input.size(0);
  const torch::Tensor partner = input.flip(0);
  torch::Tensor out;
  std::vector<float> mix_lam, lam;  // lam of the blended rows (1 for cutmix rows); lam of every row
  for (const MixDraw& d : draws) {
    mix_lam.push_back(d.cutmix ? 1.0f : static_cast<float>(d.lam));
    lam.push_back(static_cast<float>(d.lam));
  }
  const bool uniform = std::all_of(draws.begin(), draws.end(), [&](const MixDraw& d) { return same_draw(d, draws[0]); });
  const bool blends = std::any_of(draws.begin(), draws.end(), [](const MixDraw& d) { return !d.cutmix && d.lam < 1; });
  if (!blends) {
    out = input.clone();
  } else if (uniform) {  // batch mode: timm's x * lam + x.flip(0) * (1 - lam)
    out = input * draws[0].lam + partner * (1.0 - draws[0].lam);
  } else {  // one lam per row, in float32 so that a bfloat16 batch's lam is not rounded
    const torch::Tensor l =
        to_device_async(torch::tensor(mix_lam), input.device(), torch::kFloat32).view({batch, 1, 1, 1});
    out = (input.to(torch::kFloat32) * l + partner.to(torch::kFloat32) * (1 - l)).to(input.scalar_type());
  }
  if (uniform && draws[0].cutmix && draws[0].lam < 1) {
    box_of(out, draws[0].box).copy_(box_of(partner, draws[0].box));
  } else if (!uniform) {
    for (int64_t i = 0; i < batch; ++i) {
      const MixDraw& d = draws[i];
      if (d.cutmix && d.lam < 1) box_of(out[i], d.box).copy_(box_of(partner[i], d.box));
    }
  }
  out = out.contiguous(input.suggest_memory_format());
  const torch::Tensor rows = smoothed_rows(target, num_classes, smoothing);
  const torch::Tensor lt = to_device_async(torch::tensor(lam), target.device(), torch::kFloat32).view({batch, 1});
  return {out, rows * lt + rows.flip(0) * (1 - lt)};
}

}  // namespace stoker::data
