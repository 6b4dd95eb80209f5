#include "data/transforms.h"

#include <gtest/gtest.h>
#include <opencv2/imgproc.hpp>

#include <cmath>

#include "common/error.h"

namespace stoker::data {
namespace {

Image gradient(int64_t h, int64_t w, int64_t c) {
  Image im{h, w, c, std::vector<uint8_t>(h * w * c)};
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t k = 0; k < c; ++k) im.pixels[(y * w + x) * c + k] = static_cast<uint8_t>((3 * x + 5 * y + 40 * k) % 256);
  return im;
}

std::vector<uint8_t> run(const TransformPipeline& p, const Image& im, uint64_t seed, SamplePlan* plan_out = nullptr) {
  SampleRng rng(seed);
  const SamplePlan plan = p.plan(im.height, im.width, rng);
  std::vector<uint8_t> out(plan.out_height * plan.out_width * im.channels);
  apply_plan(im, Region{0, 0, im.width, im.height}, plan, out.data());
  if (plan_out) *plan_out = plan;
  return out;
}

TEST(Transforms, RandomResizedCropStaysWithinScaleAndRatio) {
  TransformPipeline p({TransformSpec{"random_resized_crop", 224, {0.25, 0.5}, {0.75, 4.0 / 3.0}}});
  EXPECT_TRUE(p.fixed_output());
  EXPECT_EQ(p.output_size(375, 500), (std::pair<int64_t, int64_t>{224, 224}));
  for (uint64_t seed = 0; seed < 300; ++seed) {
    SampleRng rng(seed);
    const SamplePlan plan = p.plan(375, 500, rng);
    const double area = double(plan.region.width * plan.region.height) / (375.0 * 500.0);
    const double ratio = double(plan.region.width) / double(plan.region.height);
    EXPECT_GE(area, 0.24) << seed;
    EXPECT_LE(area, 0.51) << seed;
    EXPECT_GE(ratio, 0.74) << seed;
    EXPECT_LE(ratio, 1.34) << seed;
    EXPECT_GE(plan.region.x, 0);
    EXPECT_GE(plan.region.y, 0);
    EXPECT_LE(plan.region.x + plan.region.width, 500);
    EXPECT_LE(plan.region.y + plan.region.height, 375);
  }
}

TEST(Transforms, ResizeThenCenterCropMatchesOpenCv) {
  const Image im = gradient(60, 80, 3);
  TransformPipeline p({TransformSpec{"resize", 30}, TransformSpec{"center_crop", 24}});
  EXPECT_EQ(p.output_size(60, 80), (std::pair<int64_t, int64_t>{24, 24}));
  const auto out = run(p, im, 0);
  // Reference: resize the whole image to 40x30, cut the centre 24x24.
  cv::Mat src(60, 80, CV_8UC3, const_cast<uint8_t*>(im.pixels.data())), resized;
  cv::resize(src, resized, cv::Size(40, 30), 0, 0, cv::INTER_LINEAR);
  const cv::Mat ref = resized(cv::Rect(8, 3, 24, 24)).clone();
  double err = 0;
  for (int y = 0; y < 24; ++y)
    for (int x = 0; x < 24 * 3; ++x) err += std::abs(int(out[y * 72 + x]) - int(ref.at<uint8_t>(y, x)));
  EXPECT_LT(err / (24 * 24 * 3), 3.0) << "mean absolute error in levels";
}

TEST(Transforms, RandomCropWithPaddingShiftsAndZeroFills) {
  const Image im = gradient(8, 8, 1);
  TransformPipeline p({TransformSpec{"random_crop", 8, {}, {}, 2, 0.5}});
  int shifted = 0;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    SamplePlan plan;
    const auto out = run(p, im, seed, &plan);
    const int64_t dx = plan.region.x, dy = plan.region.y;
    ASSERT_LE(std::abs(dx), 2);
    ASSERT_LE(std::abs(dy), 2);
    shifted += dx != 0 || dy != 0;
    for (int64_t y = 0; y < 8; ++y) {
      for (int64_t x = 0; x < 8; ++x) {
        const int64_t sy = y + dy, sx = x + dx;
        const int expected = (sy >= 0 && sy < 8 && sx >= 0 && sx < 8) ? im.pixels[sy * 8 + sx] : 0;
        ASSERT_EQ(out[y * 8 + x], expected) << "seed " << seed << " at " << y << "," << x;
      }
    }
  }
  EXPECT_GT(shifted, 30);
}

TEST(Transforms, FlipMirrorsRows) {
  const Image im = gradient(4, 5, 3);
  TransformPipeline p({TransformSpec{"horizontal_flip", 0, {}, {}, 0, 1.0}});
  const auto out = run(p, im, 0);
  for (int64_t y = 0; y < 4; ++y)
    for (int64_t x = 0; x < 5; ++x)
      for (int64_t k = 0; k < 3; ++k) EXPECT_EQ(out[(y * 5 + x) * 3 + k], im.pixels[(y * 5 + (4 - x)) * 3 + k]);
}

TEST(Transforms, SameSeedSamePlan) {
  TransformPipeline p({TransformSpec{"random_resized_crop", 64}, TransformSpec{"horizontal_flip"}});
  SampleRng a(77), b(77), c(78);
  const SamplePlan pa = p.plan(100, 120, a), pb = p.plan(100, 120, b), pc = p.plan(100, 120, c);
  EXPECT_EQ(pa.region.x, pb.region.x);
  EXPECT_EQ(pa.region.width, pb.region.width);
  EXPECT_EQ(pa.flip, pb.flip);
  EXPECT_FALSE(pa.region.x == pc.region.x && pa.region.y == pc.region.y && pa.region.width == pc.region.width);
}

TEST(Transforms, BadSpecsAreNamed) {
  try {
    TransformPipeline p({TransformSpec{"rotate", 3}}, "data.train_transforms");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("data.train_transforms[0] (rotate): unknown transform"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(TransformPipeline({TransformSpec{"center_crop", 0}}), Error);
  EXPECT_FALSE(TransformPipeline({TransformSpec{"resize", 32}}).fixed_output());
}

}  // namespace
}  // namespace stoker::data
