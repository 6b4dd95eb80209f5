#include "data/transforms.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include "common/error.h"

namespace stoker::data {

// ---- planning ----------------------------------------------------------------------------------------------

PlanView PlanView::of_image(int64_t height, int64_t width) {
  PlanView v;
  v.w = v.lw = static_cast<double>(width);
  v.h = v.lh = static_cast<double>(height);
  return v;
}

void PlanView::crop(double lx, double ly, double cw, double ch, double out_w, double out_h) {
  const double sx = w / lw, sy = h / lh;
  // A flipped view reads its logical x from the right edge of the source region.
  x = flip ? x + (lw - lx - cw) * sx : x + lx * sx;
  y = y + ly * sy;
  w = cw * sx;
  h = ch * sy;
  lw = out_w;
  lh = out_h;
}

namespace {
void check_size(const char* type, int64_t size) {
  STOKER_CHECK(size > 0, "{}: size must be a positive number of pixels, got {}", type, size);
}
}  // namespace

Resize::Resize(int64_t size) : size_(size) { check_size("resize", size); }

void Resize::plan(PlanView& v, SampleRng*) const {
  const double s = static_cast<double>(size_) / std::min(v.lw, v.lh);
  v.lw = std::round(v.lw * s);
  v.lh = std::round(v.lh * s);
}

CenterCrop::CenterCrop(int64_t size) : size_(size) { check_size("center_crop", size); }

void CenterCrop::plan(PlanView& v, SampleRng*) const {
  const double c = static_cast<double>(size_);
  v.crop(std::round((v.lw - c) / 2), std::round((v.lh - c) / 2), c, c, c, c);
}

RandomCrop::RandomCrop(int64_t size, int64_t padding) : size_(size), padding_(padding) {
  check_size("random_crop", size);
  STOKER_CHECK(padding >= 0, "random_crop: padding must be >= 0, got {}", padding);
}

void RandomCrop::plan(PlanView& v, SampleRng* rng) const {
  const double c = static_cast<double>(size_);
  const double pad = static_cast<double>(padding_);
  // Offsets within the padded image, in logical pixels; may be negative (into the padding).
  const double max_x = v.lw + 2 * pad - c, max_y = v.lh + 2 * pad - c;
  const auto offset = [rng](double max) {
    return rng ? static_cast<double>(rng->integer(0, static_cast<int64_t>(std::max(0.0, max)))) : max / 2;
  };
  const double ox = offset(max_x);
  const double oy = offset(max_y);
  v.crop(ox - pad, oy - pad, c, c, c, c);
}

RandomResizedCrop::RandomResizedCrop(int64_t size, std::pair<double, double> scale,
                                     std::pair<double, double> ratio)
    : size_(size), scale_(scale), ratio_(ratio) {
  check_size("random_resized_crop", size);
  STOKER_CHECK(scale.first > 0 && scale.first <= scale.second && scale.second <= 1,
               "random_resized_crop: scale must be [low, high] with 0 < low <= high <= 1, got [{}, {}]",
               scale.first, scale.second);
  STOKER_CHECK(ratio.first > 0 && ratio.first <= ratio.second,
               "random_resized_crop: ratio must be [low, high] with 0 < low <= high, got [{}, {}]",
               ratio.first, ratio.second);
}

void RandomResizedCrop::plan(PlanView& v, SampleRng* rng) const {
  const double s = static_cast<double>(size_);
  const double area = v.lw * v.lh;
  double cw = 0, ch = 0, cx = 0, cy = 0;
  bool found = false;
  for (int attempt = 0; attempt < 10 && rng && !found; ++attempt) {
    const double target = area * (scale_.first + (scale_.second - scale_.first) * rng->uniform());
    const double log_lo = std::log(ratio_.first), log_hi = std::log(ratio_.second);
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
    if (in_ratio < ratio_.first) {
      cw = v.lw;
      ch = std::round(cw / ratio_.first);
    } else if (in_ratio > ratio_.second) {
      ch = v.lh;
      cw = std::round(ch * ratio_.second);
    } else {
      cw = v.lw;
      ch = v.lh;
    }
    cx = std::round((v.lw - cw) / 2);
    cy = std::round((v.lh - ch) / 2);
  }
  v.crop(cx, cy, cw, ch, s, s);
}

HorizontalFlip::HorizontalFlip(double p) : p_(p) {
  STOKER_CHECK(p >= 0 && p <= 1, "horizontal_flip: p must be in [0, 1], got {}", p);
}

void HorizontalFlip::plan(PlanView& v, SampleRng* rng) const {
  if (rng && rng->uniform() < p_) v.flip = !v.flip;
}

TransformPipeline::TransformPipeline(std::vector<std::shared_ptr<const Transform>> transforms)
    : transforms_(std::move(transforms)) {
  for (size_t i = 0; i < transforms_.size(); ++i) {
    STOKER_CHECK(transforms_[i] != nullptr, "a transform pipeline holds a null transform");
    const auto* pixel = dynamic_cast<const PixelTransform*>(transforms_[i].get());
    if (pixel != nullptr) {
      pixel_.emplace_back(i, pixel);
    } else {
      STOKER_CHECK(pixel_.empty(), "transforms[{}] is a geometric transform after the pixel transform "
                   "transforms[{}]; pixel transforms (rand_augment, trivial_augment_wide) run on the planned "
                   "output, so list them after every crop, resize and flip", i, pixel_.front().first);
    }
  }
}

void TransformPipeline::apply_pixels(PixelView image, uint64_t seed) const {
  for (const auto& [index, t] : pixel_) {
    SampleRng rng(mix_seed(seed, kPixelStream, static_cast<uint64_t>(index)));
    t->apply(image, rng);
  }
}

std::pair<int64_t, int64_t> TransformPipeline::output_size(int64_t height, int64_t width) const {
  PlanView v = PlanView::of_image(height, width);
  for (const auto& t : transforms_) t->plan(v, nullptr);
  return {static_cast<int64_t>(v.lh), static_cast<int64_t>(v.lw)};
}

bool TransformPipeline::fixed_output() const {
  return output_size(101, 157) == output_size(163, 97);
}

SamplePlan TransformPipeline::plan(int64_t height, int64_t width, SampleRng& rng) const {
  PlanView v = PlanView::of_image(height, width);
  for (const auto& t : transforms_) t->plan(v, &rng);
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
