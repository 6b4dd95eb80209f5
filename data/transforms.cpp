#include "data/transforms.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include "common/error.h"

namespace stoker::data {

// ---- randomness ------------------------------------------------------------------------------------------

uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t SampleRng::next() {
  const uint64_t r = splitmix64(state_);
  state_ += 0x9e3779b97f4a7c15ull;
  return r;
}

double SampleRng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

int64_t SampleRng::integer(int64_t lo, int64_t hi) {
  if (hi <= lo) return lo;
  return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
}

// ---- planning ----------------------------------------------------------------------------------------------

TransformPipeline::TransformPipeline(std::vector<TransformSpec> specs, const std::string& where)
    : specs_(std::move(specs)) {
  for (size_t i = 0; i < specs_.size(); ++i) {
    const TransformSpec& t = specs_[i];
    const std::string at = fmt::format("{}[{}] ({})", where, i, t.type);
    if (t.type == "random_resized_crop" || t.type == "resize" || t.type == "center_crop" ||
        t.type == "random_crop") {
      STOKER_CHECK(t.size > 0, "{}: size must be a positive number of pixels", at);
    } else if (t.type != "horizontal_flip") {
      STOKER_FAIL("{}: unknown transform; known: random_resized_crop, resize, center_crop, random_crop, "
                  "horizontal_flip",
                  at);
    }
    if (t.type == "random_resized_crop") {
      STOKER_CHECK(t.scale.size() == 2 && t.scale[0] > 0 && t.scale[0] <= t.scale[1] && t.scale[1] <= 1,
                   "{}: scale must be [lo, hi] with 0 < lo <= hi <= 1", at);
      STOKER_CHECK(t.ratio.size() == 2 && t.ratio[0] > 0 && t.ratio[0] <= t.ratio[1],
                   "{}: ratio must be [lo, hi] with 0 < lo <= hi", at);
    }
    STOKER_CHECK(t.padding >= 0, "{}: padding must be >= 0", at);
    STOKER_CHECK(t.p >= 0 && t.p <= 1, "{}: p must be in [0, 1]", at);
  }
}

namespace {

// The plan under construction: a region of the source in floating point, the logical size it has
// become, and the flip.
struct View {
  double x, y, w, h;  // source region
  double lw, lh;      // logical width and height after the transforms so far
  bool flip = false;
};

// Narrows `v` to the logical rectangle (lx, ly, cw, ch) and makes that the new logical size.
void crop_logical(View& v, double lx, double ly, double cw, double ch, double out_w, double out_h) {
  const double sx = v.w / v.lw, sy = v.h / v.lh;
  // A flipped view reads its logical x from the right edge of the source region.
  const double src_x = v.flip ? v.x + (v.lw - lx - cw) * sx : v.x + lx * sx;
  v.x = src_x;
  v.y = v.y + ly * sy;
  v.w = cw * sx;
  v.h = ch * sy;
  v.lw = out_w;
  v.lh = out_h;
}

void step(const TransformSpec& t, View& v, SampleRng* rng) {
  if (t.type == "resize") {
    const double s = static_cast<double>(t.size) / std::min(v.lw, v.lh);
    v.lw = std::round(v.lw * s);
    v.lh = std::round(v.lh * s);
  } else if (t.type == "center_crop") {
    const double c = static_cast<double>(t.size);
    crop_logical(v, std::round((v.lw - c) / 2), std::round((v.lh - c) / 2), c, c, c, c);
  } else if (t.type == "random_crop") {
    const double c = static_cast<double>(t.size);
    const double pad = static_cast<double>(t.padding);
    // Offsets within the padded image, in logical pixels; may be negative (into the padding).
    const double max_x = v.lw + 2 * pad - c, max_y = v.lh + 2 * pad - c;
    const double ox = rng ? static_cast<double>(rng->integer(0, static_cast<int64_t>(std::max(0.0, max_x)))) : max_x / 2;
    const double oy = rng ? static_cast<double>(rng->integer(0, static_cast<int64_t>(std::max(0.0, max_y)))) : max_y / 2;
    crop_logical(v, ox - pad, oy - pad, c, c, c, c);
  } else if (t.type == "random_resized_crop") {
    const double s = static_cast<double>(t.size);
    const double area = v.lw * v.lh;
    double cw = 0, ch = 0, cx = 0, cy = 0;
    bool found = false;
    for (int attempt = 0; attempt < 10 && rng && !found; ++attempt) {
      const double target = area * (t.scale[0] + (t.scale[1] - t.scale[0]) * rng->uniform());
      const double log_lo = std::log(t.ratio[0]), log_hi = std::log(t.ratio[1]);
      const double aspect = std::exp(log_lo + (log_hi - log_lo) * rng->uniform());
      cw = std::round(std::sqrt(target * aspect));
      ch = std::round(std::sqrt(target / aspect));
      if (cw > 0 && ch > 0 && cw <= v.lw && ch <= v.lh) {
        cx = static_cast<double>(rng->integer(0, static_cast<int64_t>(v.lw - cw)));
        cy = static_cast<double>(rng->integer(0, static_cast<int64_t>(v.lh - ch)));
        found = true;
      }
    }
    if (!found) {  // torchvision's fallback: a centred crop of the clamped aspect ratio
      const double in_ratio = v.lw / v.lh;
      if (in_ratio < t.ratio[0]) {
        cw = v.lw;
        ch = std::round(cw / t.ratio[0]);
      } else if (in_ratio > t.ratio[1]) {
        ch = v.lh;
        cw = std::round(ch * t.ratio[1]);
      } else {
        cw = v.lw;
        ch = v.lh;
      }
      cx = std::round((v.lw - cw) / 2);
      cy = std::round((v.lh - ch) / 2);
    }
    crop_logical(v, cx, cy, cw, ch, s, s);
  } else if (t.type == "horizontal_flip") {
    if (rng && rng->uniform() < t.p) v.flip = !v.flip;
  }
}

}  // namespace

std::pair<int64_t, int64_t> TransformPipeline::output_size(int64_t height, int64_t width) const {
  View v{0, 0, double(width), double(height), double(width), double(height)};
  for (const auto& t : specs_) step(t, v, nullptr);
  return {static_cast<int64_t>(v.lh), static_cast<int64_t>(v.lw)};
}

bool TransformPipeline::fixed_output() const {
  return output_size(101, 157) == output_size(163, 97);
}

SamplePlan TransformPipeline::plan(int64_t height, int64_t width, SampleRng& rng) const {
  View v{0, 0, double(width), double(height), double(width), double(height)};
  for (const auto& t : specs_) step(t, v, &rng);
  SamplePlan p;
  p.region.x = static_cast<int64_t>(std::lround(v.x));
  p.region.y = static_cast<int64_t>(std::lround(v.y));
  p.region.width = std::max<int64_t>(1, std::lround(v.w));
  p.region.height = std::max<int64_t>(1, std::lround(v.h));
  p.out_width = static_cast<int64_t>(v.lw);
  p.out_height = static_cast<int64_t>(v.lh);
  p.flip = v.flip;
  return p;
}

// ---- applying -----------------------------------------------------------------------------------------------

Region needed_region(const SamplePlan& plan, int64_t height, int64_t width) {
  const int64_t x0 = std::clamp<int64_t>(plan.region.x, 0, width);
  const int64_t y0 = std::clamp<int64_t>(plan.region.y, 0, height);
  const int64_t x1 = std::clamp<int64_t>(plan.region.x + plan.region.width, 0, width);
  const int64_t y1 = std::clamp<int64_t>(plan.region.y + plan.region.height, 0, height);
  return Region{x0, y0, x1 - x0, y1 - y0};
}

void apply_plan(const Image& decoded, const Region& have, const SamplePlan& plan, uint8_t* out) {
  const int64_t c = decoded.channels;
  const int64_t ow = plan.out_width, oh = plan.out_height;
  const Region& r = plan.region;
  // The valid part of the region, and where it lands in the output.
  const Region v = needed_region(plan, have.y + have.height, have.x + have.width);
  const auto dst_of = [](int64_t a, int64_t origin, int64_t extent, int64_t out_extent) {
    return static_cast<int64_t>(std::lround(double(a - origin) * double(out_extent) / double(extent)));
  };
  const int64_t dx0 = dst_of(v.x, r.x, r.width, ow), dx1 = dst_of(v.x + v.width, r.x, r.width, ow);
  const int64_t dy0 = dst_of(v.y, r.y, r.height, oh), dy1 = dst_of(v.y + v.height, r.y, r.height, oh);
  if (dx0 != 0 || dy0 != 0 || dx1 != ow || dy1 != oh || v.width <= 0 || v.height <= 0) {
    std::memset(out, 0, static_cast<size_t>(oh * ow * c));  // padding
  }
  if (v.width > 0 && v.height > 0 && dx1 > dx0 && dy1 > dy0) {
    // Source rectangle in decoded pixels (the decoded image may be a scaled `have`).
    const double sx = double(decoded.width) / double(have.width);
    const double sy = double(decoded.height) / double(have.height);
    const int64_t sx0 = std::clamp<int64_t>(std::lround((v.x - have.x) * sx), 0, decoded.width - 1);
    const int64_t sy0 = std::clamp<int64_t>(std::lround((v.y - have.y) * sy), 0, decoded.height - 1);
    const int64_t sx1 = std::clamp<int64_t>(std::lround((v.x + v.width - have.x) * sx), sx0 + 1, decoded.width);
    const int64_t sy1 = std::clamp<int64_t>(std::lround((v.y + v.height - have.y) * sy), sy0 + 1, decoded.height);
    const int type = CV_8UC(static_cast<int>(c));
    const cv::Mat src(static_cast<int>(sy1 - sy0), static_cast<int>(sx1 - sx0), type,
                      const_cast<uint8_t*>(decoded.pixels.data()) + (sy0 * decoded.width + sx0) * c,
                      static_cast<size_t>(decoded.width * c));
    cv::Mat dst(static_cast<int>(dy1 - dy0), static_cast<int>(dx1 - dx0), type,
                out + (dy0 * ow + dx0) * c, static_cast<size_t>(ow * c));
    if (src.rows == dst.rows && src.cols == dst.cols) {
      src.copyTo(dst);
    } else {
      const bool shrink_a_lot = src.cols > 2 * dst.cols && src.rows > 2 * dst.rows;
      cv::resize(src, dst, dst.size(), 0, 0, shrink_a_lot ? cv::INTER_AREA : cv::INTER_LINEAR);
    }
  }
  if (plan.flip) {
    for (int64_t y = 0; y < oh; ++y) {
      uint8_t* row = out + y * ow * c;
      for (int64_t a = 0, b = ow - 1; a < b; ++a, --b) {
        for (int64_t k = 0; k < c; ++k) std::swap(row[a * c + k], row[b * c + k]);
      }
    }
  }
}

}  // namespace stoker::data
