#include "data/transforms.h"

#include <gtest/gtest.h>
#include <opencv2/imgproc.hpp>

#include <cmath>

#include "common/error.h"
#include "test_util.h"
#include "data/transform_options.h"

namespace stoker::data {
namespace {

Image gradient(int64_t h, int64_t w, int64_t c) {
  Image im{h, w, c, std::vector<uint8_t>(h * w * c)};
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t k = 0; k < c; ++k) im.pixels[(y * w + x) * c + k] = static_cast<uint8_t>((3 * x + 5 * y + 40 * k) % 256);
  return im;
}

// A pipeline of the given transforms.
template <typename... T>
TransformPipeline pipeline(std::shared_ptr<T>... transforms) {
  return TransformPipeline({std::shared_ptr<const Transform>(std::move(transforms))...});
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
  const TransformPipeline p = pipeline(std::make_shared<RandomResizedCrop>(224, std::pair{0.25, 0.5}, std::pair{0.75, 4.0 / 3.0}));
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
  const TransformPipeline p = pipeline(std::make_shared<Resize>(30), std::make_shared<CenterCrop>(24));
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
  const TransformPipeline p = pipeline(std::make_shared<RandomCrop>(8, 2));
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
  const TransformPipeline p = pipeline(std::make_shared<HorizontalFlip>(1.0));
  const auto out = run(p, im, 0);
  for (int64_t y = 0; y < 4; ++y)
    for (int64_t x = 0; x < 5; ++x)
      for (int64_t k = 0; k < 3; ++k) EXPECT_EQ(out[(y * 5 + x) * 3 + k], im.pixels[(y * 5 + (4 - x)) * 3 + k]);
}

TEST(Transforms, SameSeedSamePlan) {
  const TransformPipeline p = pipeline(std::make_shared<RandomResizedCrop>(64, std::pair{0.08, 1.0}, std::pair{3.0 / 4.0, 4.0 / 3.0}),
                                      std::make_shared<HorizontalFlip>(0.5));
  SampleRng a(77), b(77), c(78);
  const SamplePlan pa = p.plan(100, 120, a), pb = p.plan(100, 120, b), pc = p.plan(100, 120, c);
  EXPECT_EQ(pa.region.x, pb.region.x);
  EXPECT_EQ(pa.region.width, pb.region.width);
  EXPECT_EQ(pa.flip, pb.flip);
  EXPECT_FALSE(pa.region.x == pc.region.x && pa.region.y == pc.region.y && pa.region.width == pc.region.width);
}

TEST(Transforms, BadOptionsAreNamedByPositionAndType) {
  std::vector<TypedOptions> list = {make_transform("resize"), make_transform("center_crop")};
  list[0].as<ResizeOptions>().size = 32;
  EXPECT_CONTAINS(stoker::testing::error_of([&] { make_transform_pipeline(list); }),
                  "transforms[1] (center_crop): center_crop needs a 'size' (pixels)");
  list[1].as<CenterCropOptions>().size = 24;
  EXPECT_EQ(make_transform_pipeline(list).output_size(60, 80), (std::pair<int64_t, int64_t>{24, 24}));
  list.emplace_back("rotate", std::make_unique<NoOptions>());
  EXPECT_CONTAINS(stoker::testing::error_of([&] { make_transform_pipeline(list); }),
                  "transforms[2] (rotate): unknown transform type 'rotate'; known: center_crop, horizontal_flip");
  EXPECT_THROW(CenterCrop(0), Error);
  EXPECT_THROW(RandomResizedCrop(8, {0.5, 0.2}, {1, 1}), Error);
  EXPECT_FALSE(pipeline(std::make_shared<Resize>(32)).fixed_output());
}

// The registry builds the transform its options describe: the same plans as the object made directly.
TEST(Transforms, RegisteredTypesBuildTheirTransform) {
  TypedOptions crop = make_transform("random_resized_crop");
  crop.as<RandomResizedCropOptions>().size = 40;
  crop.as<RandomResizedCropOptions>().scale = {0.3, 0.6};
  TypedOptions flip = make_transform("horizontal_flip");
  flip.as<HorizontalFlipOptions>().p = 0.7;
  const TransformPipeline built = make_transform_pipeline({crop, flip});
  const TransformPipeline direct = pipeline(
      std::make_shared<RandomResizedCrop>(40, std::pair{0.3, 0.6}, std::pair{3.0 / 4.0, 4.0 / 3.0}),
      std::make_shared<HorizontalFlip>(0.7));
  for (uint64_t seed = 0; seed < 50; ++seed) {
    SampleRng a(seed), b(seed);
    const SamplePlan pa = built.plan(90, 70, a), pb = direct.plan(90, 70, b);
    EXPECT_EQ(pa.region.x, pb.region.x);
    EXPECT_EQ(pa.region.y, pb.region.y);
    EXPECT_EQ(pa.region.width, pb.region.width);
    EXPECT_EQ(pa.region.height, pb.region.height);
    EXPECT_EQ(pa.flip, pb.flip);
  }
}

// An application's own transform type: an entry of options and a factory, as the registry holds
// (a registry of its own here, so that the global one keeps only the built-in names the config tests
// list), composed with the built-in transforms.
TEST(Transforms, ApplicationsDefineTheirOwn) {
  struct ShrinkOptions : TypeOptionsOf<ShrinkOptions> {
    int64_t by = 2;
    void visit(OptionsVisitor& v) override { v.field("by", by, rules::at_least(1)); }
  };
  class Shrink : public Transform {
   public:
    explicit Shrink(int64_t by) : by_(static_cast<double>(by)) {}
    void plan(PlanView& v, SampleRng*) const override {
      v.lw = std::floor(v.lw / by_);
      v.lh = std::floor(v.lh / by_);
    }

   private:
    double by_;
  };
  Registry<TransformType> registry("transform");
  registry.add("shrink", {options_of<ShrinkOptions>(), [](const TypedOptions& o) {
                            return std::make_shared<Shrink>(o.as<ShrinkOptions>().by);
                          }});
  TypedOptions shrink("shrink", registry.get("shrink").options());
  shrink.as<ShrinkOptions>().by = 4;
  const TransformPipeline p({registry.get("shrink").create(shrink), std::make_shared<CenterCrop>(8)});
  EXPECT_EQ(p.output_size(40, 80), (std::pair<int64_t, int64_t>{8, 8}));
  SampleRng rng(0);
  const SamplePlan plan = p.plan(40, 80, rng);
  EXPECT_EQ(plan.region.width, 32) << "8 shrunk pixels are 32 source pixels";
  EXPECT_EQ(plan.region.x, 24);
}

}  // namespace
}  // namespace stoker::data
