// RandAugment's and TrivialAugmentWide's ops and magnitude tables against torchvision.transforms.v2
// (tests/golden/augment_golden.h, written by tests/golden/augment_golden.py).
//
// Tolerances: the magnitude tables equal torchvision's float32 values exactly; the colour and
// histogram ops (brightness, color, contrast, sharpness, posterize, solarize, autocontrast,
// equalize) equal torchvision's bytes exactly, but for float32 rounding-order differences: at most
// 1 value in 100 may differ, by 1; the geometric ops (shear, translate, rotate: nearest neighbour)
// may take a neighbouring source pixel where the source coordinate is within float rounding of a
// half-pixel boundary: at most 2 pixels in 100 may differ.
#include "data/augment_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/error.h"
#include "data/auto_augment.h"
#include "golden/augment_golden.h"

namespace stoker::data {
namespace {

namespace golden = stoker::golden::augment;

// Must match pixel() in tests/golden/augment_golden.py. HWC.
std::vector<uint8_t> augment_golden_image(int64_t c, int64_t h, int64_t w) {
  std::vector<uint8_t> out(static_cast<size_t>(c * h * w));
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t k = 0; k < c; ++k)
        out[size_t((y * w + x) * c + k)] = static_cast<uint8_t>((37 * x + 11 * y + 71 * k + (x * y * (k + 1)) % 23) % 201 + 27);
  return out;
}

AugmentOp op_named(const std::string& name) {
  for (int i = 0; i < kAugmentOpCount; ++i) {
    if (name == augment_op_name(static_cast<AugmentOp>(i))) return static_cast<AugmentOp>(i);
  }
  ADD_FAILURE() << "no op " << name;
  return AugmentOp::kIdentity;
}

bool geometric(AugmentOp op) {
  return op == AugmentOp::kShearX || op == AugmentOp::kShearY || op == AugmentOp::kTranslateX ||
         op == AugmentOp::kTranslateY || op == AugmentOp::kRotate;
}

// CHW bytes, two letters a-p each (high, low 4 bits), to HWC.
std::vector<uint8_t> from_letters_chw(const char* text, int64_t c, int64_t h, int64_t w) {
  std::vector<uint8_t> out(static_cast<size_t>(c * h * w));
  for (int64_t k = 0; k < c; ++k)
    for (int64_t i = 0; i < h * w; ++i) {
      const char* pair = text + 2 * (k * h * w + i);
      out[size_t(i * c + k)] = static_cast<uint8_t>((pair[0] - 'a') * 16 + (pair[1] - 'a'));
    }
  return out;
}

TEST(AugmentOps, MagnitudeTablesEqualTorchvisions) {
  int checked = 0;
  for (const golden::Table& t : golden::kTables) {
    const AugmentOp op = op_named(t.op);
    for (int b = 0; b < golden::kBins; ++b) {
      const double mine = augment_magnitude(t.space, op, b, golden::kBins, t.height, t.width);
      EXPECT_EQ(float(mine), float(t.values[b])) << t.op << " bin " << b << " at " << t.height << "x" << t.width;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 2 * 2 * kAugmentOpCount * golden::kBins);
}

TEST(AugmentOps, EveryOpEqualsTorchvisionWithinItsTolerance) {
  int cases = 0;
  for (const golden::Case& g : golden::kCases) {
    const golden::ImageSize size = golden::kImages[g.image];
    const AugmentOp op = op_named(g.op);
    const double m = augment_magnitude(g.space, op, g.bin, golden::kBins, size.height, size.width) * g.sign;
    EXPECT_EQ(float(m), float(g.magnitude)) << g.op << " bin " << g.bin;
    std::vector<uint8_t> im = augment_golden_image(size.channels, size.height, size.width);
    apply_augment_op(PixelView{im.data(), size.height, size.width, size.channels}, op, g.magnitude);
    const std::vector<uint8_t> want = from_letters_chw(g.output, size.channels, size.height, size.width);
    const int64_t pixels = size.height * size.width;
    int64_t differing = 0, worst = 0;
    for (int64_t i = 0; i < pixels; ++i) {
      bool differs = false;
      for (int64_t k = 0; k < size.channels; ++k) {
        const int64_t d = std::abs(int64_t(im[size_t(i * size.channels + k)]) - want[size_t(i * size.channels + k)]);
        worst = std::max(worst, d);
        differs = differs || d != 0;
      }
      differing += differs ? 1 : 0;
    }
    const std::string what = std::string(g.op) + " m=" + std::to_string(g.magnitude) + " on image " +
                             std::to_string(g.image);
    if (geometric(op)) {
      EXPECT_LE(differing * 50, pixels) << what << ": " << differing << " of " << pixels << " pixels differ";
    } else {
      EXPECT_LE(worst, 1) << what;
      EXPECT_LE(differing * 100, pixels) << what << ": " << differing << " of " << pixels << " pixels differ";
    }
    ++cases;
  }
  EXPECT_GE(cases, 90);
}

TEST(AugmentOps, ColorIsIdentityOnGrayscaleAndPosterizeMasksBits) {
  std::vector<uint8_t> gray = augment_golden_image(1, 12, 16);
  const std::vector<uint8_t> before = gray;
  apply_augment_op(PixelView{gray.data(), 12, 16, 1}, AugmentOp::kColor, 0.9);
  EXPECT_EQ(gray, before);
  apply_augment_op(PixelView{gray.data(), 12, 16, 1}, AugmentOp::kPosterize, 3.0);
  for (size_t i = 0; i < gray.size(); ++i) EXPECT_EQ(gray[i], before[i] & 0xe0) << i;
}

TEST(AugmentOps, RejectsImagesOfTwoChannels) {
  std::vector<uint8_t> im(2 * 4 * 4, 9);
  EXPECT_THROW(apply_augment_op(PixelView{im.data(), 4, 4, 2}, AugmentOp::kEqualize, 0), Error);
}

}  // namespace
}  // namespace stoker::data
