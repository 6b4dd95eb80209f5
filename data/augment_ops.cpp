// RandAugment's image operations on uint8 HWC pixels (see augment_ops.h). Each mirrors the float32
// arithmetic of torchvision.transforms.v2.functional's uint8 kernel, step by step: where torchvision
// multiplies a uint8 tensor by a Python float, the float is rounded to float32 first; `add_(t, alpha)`
// is a fused multiply-add in ATen's vectorized kernels; a float result goes back to uint8 clamped to
// [0, 255] and truncated.
#include "data/augment_ops.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/error.h"

namespace stoker::data {

namespace {

constexpr double kPi = 3.14159265358979323846;

uint8_t to_u8(float v) { return static_cast<uint8_t>(std::clamp(v, 0.0f, 255.0f)); }

// a * b + c rounded once to float, as a fused multiply-add: in double the product of two floats is
// exact, and so is the sum wherever the exact result spans under 53 bits, which holds for every use
// here (uint8-scale operands, factors of at least 2^-10); then the one rounding is to float. Inline
// on any x86-64, where std::fma is a library call unless the build targets FMA.
float fused(float a, float b, float c) { return float(double(a) * double(b) + double(c)); }

// Round half to even for |v| < 2^22 (the default rounding mode), without a library call.
float round_even(float v) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  return v >= 0 ? (v + kMagic) - kMagic : -((-v + kMagic) - kMagic);
}

std::vector<uint8_t>& scratch(size_t bytes) {
  thread_local std::vector<uint8_t> buffer;
  if (buffer.size() < bytes) buffer.resize(bytes);
  return buffer;
}

// Applies a 256-entry table to every channel value (`per_channel`: one table per channel).
void apply_lut(PixelView im, const uint8_t* lut, bool per_channel) {
  const int64_t c = im.channels, n = im.size();
  if (!per_channel || c == 1) {
    for (int64_t i = 0; i < n; ++i) im.data[i] = lut[im.data[i]];
    return;
  }
  for (int64_t i = 0; i < n; i += c) {
    for (int64_t k = 0; k < c; ++k) im.data[i + k] = lut[k * 256 + im.data[i + k]];
  }
}

// torchvision's _rgb_to_grayscale_image (float32, fused adds), floored as its uint8 callers do.
float gray_floor(const uint8_t* p) {
  const float l = fused(0.114f, float(p[2]), fused(0.587f, float(p[1]), float(p[0]) * 0.2989f));
  return float(static_cast<int>(l));  // l >= 0: truncation is the floor
}

}  // namespace

void affine_nearest(PixelView im, double angle, double tx, double ty, double shear_x, double shear_y,
                    double cx, double cy) {
  // _get_inverse_affine_matrix (torchvision/transforms/v2/functional/_geometry.py), in double.
  const double deg = kPi / 180.0;
  const double rot = angle * deg, sx = shear_x * deg, sy = shear_y * deg;
  const double cos_sy = std::cos(sy), tan_sx = std::tan(sx), rot_minus_sy = rot - sy;
  const double a = std::cos(rot_minus_sy) / cos_sy;
  const double b = -(a * tan_sx + std::sin(rot));
  const double c = std::sin(rot_minus_sy) / cos_sy;
  const double d = std::cos(rot) - c * tan_sx;
  std::array<double, 6> m{d, -b, 0.0, -c, a, 0.0};
  m[2] += cx - m[0] * (cx + tx) - m[1] * (cy + ty);
  m[5] += cy - m[3] * (cx + tx) - m[4] * (cy + ty);
  // _affine_grid: theta in float32 divided by half the size; the grid is pixel centres about the
  // image centre. grid_sample (align_corners=False, nearest, zeros) rounds half to even.
  const int64_t h = im.height, w = im.width, ch = im.channels;
  const float hw = 0.5f * float(w), hh = 0.5f * float(h);
  const float r00 = float(m[0]) / hw, r10 = float(m[1]) / hw, r20 = float(m[2]) / hw;
  const float r01 = float(m[3]) / hh, r11 = float(m[4]) / hh, r21 = float(m[5]) / hh;
  std::vector<uint8_t>& src = scratch(static_cast<size_t>(im.size()));
  std::memcpy(src.data(), im.data, static_cast<size_t>(im.size()));
  // x * r00 and x * r01 for every column (the same products as per pixel, computed once).
  thread_local std::vector<float> column_terms;
  column_terms.resize(static_cast<size_t>(2 * w));
  for (int64_t j = 0; j < w; ++j) {
    const float x = float(j) - (float(w) - 1.0f) * 0.5f;
    column_terms[size_t(2 * j)] = x * r00;
    column_terms[size_t(2 * j + 1)] = x * r01;
  }
  const float limit = 4194304.0f;  // 2^22: beyond it a coordinate is far outside any image
  for (int64_t i = 0; i < h; ++i) {
    const float y = float(i) - (float(h) - 1.0f) * 0.5f;
    const float yx = y * r10, yy = y * r11;
    uint8_t* out = im.data + i * w * ch;
    for (int64_t j = 0; j < w; ++j, out += ch) {
      const float gx = column_terms[size_t(2 * j)] + yx + r20, gy = column_terms[size_t(2 * j + 1)] + yy + r21;
      const float ux = (gx + 1.0f) * hw - 0.5f, uy = (gy + 1.0f) * hh - 0.5f;
      const float fx = std::abs(ux) < limit ? round_even(ux) : -1.0f;
      const float fy = std::abs(uy) < limit ? round_even(uy) : -1.0f;
      if (fx >= 0 && fx < float(w) && fy >= 0 && fy < float(h)) {
        const uint8_t* from = src.data() + (static_cast<int64_t>(fy) * w + static_cast<int64_t>(fx)) * ch;
        for (int64_t k = 0; k < ch; ++k) out[k] = from[k];
      } else {
        for (int64_t k = 0; k < ch; ++k) out[k] = 0;
      }
    }
  }
}

void adjust_brightness(PixelView im, double factor) {
  std::array<uint8_t, 256> lut;
  for (int v = 0; v < 256; ++v) lut[v] = to_u8(float(v) * float(factor));
  apply_lut(im, lut.data(), false);
}

void adjust_saturation(PixelView im, double factor) {
  if (im.channels == 1) return;  // torchvision: "Match PIL behaviour"
  const float r = float(factor), alpha = float(1.0 - factor);
  const int64_t n = im.height * im.width;
  for (int64_t i = 0; i < n; ++i) {
    uint8_t* p = im.data + i * 3;
    const float g = gray_floor(p);
    for (int k = 0; k < 3; ++k) p[k] = to_u8(fused(alpha, g, float(p[k]) * r));
  }
}

void adjust_contrast(PixelView im, double factor) {
  const int64_t n = im.height * im.width;
  int64_t sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    sum += im.channels == 3 ? static_cast<int64_t>(gray_floor(im.data + i * 3)) : im.data[i];
  }
  const float mean = float(sum) / float(n);
  const float r = float(factor), alpha = float(1.0 - factor);
  std::array<uint8_t, 256> lut;
  for (int v = 0; v < 256; ++v) lut[v] = to_u8(fused(alpha, mean, float(v) * r));
  apply_lut(im, lut.data(), false);
}

void adjust_sharpness(PixelView im, double factor) {
  const int64_t h = im.height, w = im.width, c = im.channels;
  if (h <= 2 || w <= 2) return;
  std::vector<uint8_t>& src = scratch(static_cast<size_t>(im.size()));
  std::memcpy(src.data(), im.data, static_cast<size_t>(im.size()));
  const float alpha = float(1.0 - factor);
  const int64_t row = w * c;
  for (int64_t i = 1; i + 1 < h; ++i) {
    const uint8_t* above = src.data() + (i - 1) * row;
    const uint8_t* here = above + row;
    const uint8_t* below = here + row;
    uint8_t* out = im.data + i * row;
    for (int64_t q = c; q < row - c; ++q) {  // every channel value of the inner columns
      // The 3x3 kernel of ones with 5 in the middle, over 13, rounded (never a tie: S/13 + 1/2 is
      // not an integer).
      const int s = above[q - c] + above[q] + above[q + c] + here[q - c] + 5 * here[q] + here[q + c] +
                    below[q - c] + below[q] + below[q + c];
      const float blur = float((2 * s + 13) / 26);
      const float x = float(here[q]);
      out[q] = to_u8(fused(alpha, blur - x, x));
    }
  }
}

void posterize(PixelView im, int bits) {
  STOKER_CHECK(bits >= 0 && bits <= 8, "posterize: bits must be in [0, 8], got {}", bits);
  if (bits >= 8) return;
  const uint8_t mask = static_cast<uint8_t>(((1 << bits) - 1) << (8 - bits));
  const int64_t n = im.size();
  for (int64_t i = 0; i < n; ++i) im.data[i] &= mask;
}

void solarize(PixelView im, double threshold) {
  const float t = float(threshold);  // uint8 >= Python float compares in float32
  std::array<uint8_t, 256> lut;
  for (int v = 0; v < 256; ++v) lut[v] = float(v) >= t ? static_cast<uint8_t>(255 - v) : static_cast<uint8_t>(v);
  apply_lut(im, lut.data(), false);
}

void autocontrast(PixelView im) {
  const int64_t c = im.channels, n = im.height * im.width;
  std::vector<uint8_t> lut(static_cast<size_t>(256 * c));
  for (int64_t k = 0; k < c; ++k) {
    uint8_t lo = 255, hi = 0;
    for (int64_t i = 0; i < n; ++i) {
      lo = std::min(lo, im.data[i * c + k]);
      hi = std::max(hi, im.data[i * c + k]);
    }
    const bool flat = lo == hi;
    const float minimum = flat ? 0.0f : float(lo);
    const float inv_scale = flat ? 1.0f : float(hi - lo) * float(1.0 / 255.0);
    for (int v = 0; v < 256; ++v) lut[size_t(k * 256 + v)] = to_u8((float(v) - minimum) / inv_scale);
  }
  apply_lut(im, lut.data(), true);
}

void equalize(PixelView im) {
  // PIL's scheme, as torchvision's equalize_image: per channel, lut[k] = (cum[k-1] + step/2) / step
  // with step = (pixels not of the largest value present) / 255; unchanged where step is 0.
  const int64_t c = im.channels, n = im.height * im.width;
  std::vector<uint8_t> lut(static_cast<size_t>(256 * c));
  for (int64_t k = 0; k < c; ++k) {
    std::array<int64_t, 256> hist{};
    for (int64_t i = 0; i < n; ++i) ++hist[im.data[i * c + k]];
    int last = 255;
    while (last > 0 && hist[last] == 0) --last;
    const int64_t step = (n - hist[last]) / 255;
    uint8_t* table = lut.data() + k * 256;
    int64_t cum = 0;
    for (int v = 0; v < 256; ++v) {
      if (step == 0) {
        table[v] = static_cast<uint8_t>(v);
        continue;
      }
      table[v] = static_cast<uint8_t>(std::clamp<int64_t>((cum + step / 2) / step, 0, 255));
      cum += hist[v];
    }
  }
  apply_lut(im, lut.data(), true);
}

namespace {

// torch.rot90(image, k, dims=(-2, -1)) for k = 1, 2, 3 (k = 1, 3 on square images).
void rotate_quarter(PixelView im, int k) {
  const int64_t h = im.height, w = im.width, c = im.channels;
  std::vector<uint8_t>& src = scratch(static_cast<size_t>(im.size()));
  std::memcpy(src.data(), im.data, static_cast<size_t>(im.size()));
  for (int64_t i = 0; i < h; ++i) {
    for (int64_t j = 0; j < w; ++j) {
      const int64_t y = k == 1 ? j : k == 2 ? h - 1 - i : h - 1 - j;
      const int64_t x = k == 1 ? w - 1 - i : k == 2 ? w - 1 - j : i;
      std::memcpy(im.data + (i * w + j) * c, src.data() + (y * w + x) * c, static_cast<size_t>(c));
    }
  }
}

// torchvision's rotate_image (expand=False, no centre): the angle modulo 360, its quarter turns
// exactly, else an affine transform by -angle about the image centre.
void rotate(PixelView im, double angle) {
  angle = std::fmod(angle, 360.0);
  if (angle < 0) angle += 360.0;
  if (angle == 0) return;
  if (angle == 180) return rotate_quarter(im, 2);
  if (im.height == im.width && (angle == 90 || angle == 270)) return rotate_quarter(im, angle == 90 ? 1 : 3);
  affine_nearest(im, -angle, 0, 0, 0, 0, 0, 0);
}

double degrees_atan(double m) { return std::atan(m) * (180.0 / kPi); }

}  // namespace

const char* augment_op_name(AugmentOp op) {
  static const char* const names[kAugmentOpCount] = {
      "Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness",
      "Color", "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize"};
  return names[static_cast<int>(op)];
}

void apply_augment_op(PixelView im, AugmentOp op, double m) {
  STOKER_CHECK(im.channels == 1 || im.channels == 3,
               "RandAugment and TrivialAugmentWide work on 1- or 3-channel images, got {} channels", im.channels);
  const double corner_x = -0.5 * double(im.width), corner_y = -0.5 * double(im.height);  // center=[0, 0]
  switch (op) {
    case AugmentOp::kIdentity: return;
    case AugmentOp::kShearX: return affine_nearest(im, 0, 0, 0, degrees_atan(m), 0, corner_x, corner_y);
    case AugmentOp::kShearY: return affine_nearest(im, 0, 0, 0, 0, degrees_atan(m), corner_x, corner_y);
    case AugmentOp::kTranslateX: return affine_nearest(im, 0, std::trunc(m), 0, 0, 0, 0, 0);
    case AugmentOp::kTranslateY: return affine_nearest(im, 0, 0, std::trunc(m), 0, 0, 0, 0);
    case AugmentOp::kRotate: return rotate(im, m);
    case AugmentOp::kBrightness: return adjust_brightness(im, 1.0 + m);
    case AugmentOp::kColor: return adjust_saturation(im, 1.0 + m);
    case AugmentOp::kContrast: return adjust_contrast(im, 1.0 + m);
    case AugmentOp::kSharpness: return adjust_sharpness(im, 1.0 + m);
    case AugmentOp::kPosterize: return posterize(im, static_cast<int>(m));
    case AugmentOp::kSolarize: return solarize(im, 255.0 * m);
    case AugmentOp::kAutoContrast: return autocontrast(im);
    case AugmentOp::kEqualize: return equalize(im);
  }
}

}  // namespace stoker::data
