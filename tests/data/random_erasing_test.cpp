// Random erasing (data/random_erasing.h): the rectangles each sample draws, the fills of each mode,
// the rate at which samples are erased, and the determinism of the batch operation.
#include "data/random_erasing.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/error.h"
#include "data/augmented_source.h"

namespace stoker::data {
namespace {

RandomErasingSettings always(const std::string& mode) {
  RandomErasingSettings s;
  s.probability = 1.0;
  s.mode = mode;
  return s;
}

TEST(RandomErasing, RectanglesFollowTheAreaAndAspectRanges) {
  RandomErasingSettings s = always("const");
  s.min_count = 1;
  s.max_count = 3;
  int64_t rects = 0, samples_with_more = 0;
  for (int64_t i = 0; i < 500; ++i) {
    const std::vector<EraseRect> r = draw_erasing(s, 32, 40, erasing_sample_seed(3, 0, i));
    ASSERT_GE(r.size(), 1u);
    ASSERT_LE(r.size(), 3u);
    samples_with_more += r.size() > 1;
    for (const EraseRect& e : r) {
      ++rects;
      EXPECT_GE(e.top, 0);
      EXPECT_GE(e.left, 0);
      EXPECT_LT(e.height, 32);
      EXPECT_LT(e.width, 40);
      EXPECT_LE(e.top + e.height, 32);
      EXPECT_LE(e.left + e.width, 40);
      // Area at most max_area of the image (each of `count` rectangles gets a share of it), with
      // rounding of each side by half a pixel.
      EXPECT_LE(static_cast<double>(e.height * e.width), (std::sqrt(1280.0 / 3) + 1) * (std::sqrt(1280.0 / 3) + 1));
      const double aspect = static_cast<double>(e.height) / static_cast<double>(std::max<int64_t>(1, e.width));
      EXPECT_LE(aspect, (1 / 0.3) * 1.6);  // rounding of small sides widens the range a little
    }
  }
  EXPECT_GT(samples_with_more, 200) << "max_count 3 gives 2 or 3 rectangles to about 2/3 of the samples";
  EXPECT_GT(rects, 500);
}

TEST(RandomErasing, ProbabilityIsTheShareOfErasedSamples) {
  RandomErasingSettings s = always("const");
  s.probability = 0.25;
  int64_t erased = 0;
  for (int64_t i = 0; i < 4000; ++i) erased += !draw_erasing(s, 32, 32, erasing_sample_seed(11, 2, i)).empty();
  // Fixed seeds, so a fixed count; the bound is 5 standard deviations (27) around 1000.
  EXPECT_NEAR(static_cast<double>(erased), 1000.0, 140.0);
  s.probability = 0.0;
  EXPECT_TRUE(draw_erasing(s, 32, 32, 1).empty());
}

TEST(RandomErasing, EachModeFillsItsRectanglesAndNothingElse) {
  const torch::Tensor x = torch::randn({3, 2, 8, 10});
  EraseRect r;
  r.top = 2;
  r.left = 3;
  r.height = 4;
  r.width = 5;
  const std::vector<std::vector<EraseRect>> rects = {{r}, {}, {r}};
  const std::vector<uint64_t> seeds = {1, 2, 3};
  auto inside = [&](const torch::Tensor& t) { return t.slice(-2, 2, 6).slice(-1, 3, 8); };
  auto outside = [&](torch::Tensor t) {
    t = t.clone();
    inside(t).fill_(7.0);
    return t;
  };
  for (const std::string mode : {"const", "rand", "pixel"}) {
    const torch::Tensor out = apply_erasing(mode, x, rects, seeds);
    EXPECT_TRUE(torch::equal(outside(out), outside(x))) << mode;
    EXPECT_TRUE(torch::equal(out[1], x[1])) << mode;
    const torch::Tensor box = inside(out[0]);
    if (mode == "const") EXPECT_EQ(box.abs().max().item<float>(), 0.0f);
    if (mode == "rand") {  // one value per channel
      EXPECT_TRUE(torch::equal(box, box.select(1, 0).select(1, 0).view({2, 1, 1}).expand({2, 4, 5})));
      EXPECT_NE(box[0][0][0].item<float>(), box[1][0][0].item<float>());
    }
    if (mode == "pixel") EXPECT_GT(box.std().item<double>(), 0.5);
    // The noise is the sample's own: again the same, and sample 2's differs from sample 0's.
    EXPECT_TRUE(torch::equal(out, apply_erasing(mode, x, rects, seeds))) << mode;
    if (mode != "const") EXPECT_FALSE(torch::equal(inside(out[0]), inside(out[2]))) << mode;
  }
  EXPECT_TRUE(torch::equal(apply_erasing("pixel", x, {{}, {}, {}}, seeds), x));
}

TEST(RandomErasing, TheBatchOperationIsAFunctionOfSeedEpochAndPosition) {
  const BatchOp op = random_erasing_op(always("pixel"), 5, 4);
  auto run = [&](int64_t epoch, int64_t index) {
    Batch b;
    b.input = torch::zeros({4, 3, 16, 16});
    b.target = torch::zeros({4}, torch::kLong);
    b.index = index;
    op(b, epoch);
    return b.input;
  };
  EXPECT_TRUE(torch::equal(run(0, 3), run(0, 3)));
  EXPECT_FALSE(torch::equal(run(0, 3), run(0, 4)));
  EXPECT_FALSE(torch::equal(run(0, 3), run(1, 3)));
  // Sample 1 of batch 3 (position 13) is what draw_erasing gives position 13.
  const torch::Tensor out = run(0, 3);
  const std::vector<EraseRect> r = draw_erasing(always("pixel"), 16, 16, erasing_sample_seed(5, 0, 13));
  ASSERT_FALSE(r.empty());
  EXPECT_NE(out[1][0][r[0].top][r[0].left].item<float>(), 0.0f);
  EXPECT_EQ((out[1] != 0).sum().item<int64_t>() > 0, true);
}

TEST(RandomErasing, SettingsThatDisagreeAreRefused) {
  RandomErasingSettings s = always("const");
  s.min_area = 0.5;
  s.max_area = 0.2;
  EXPECT_THROW(s.check(), Error);
  s = always("const");
  s.min_count = 3;
  s.max_count = 2;
  EXPECT_THROW(s.check(), Error);
  s = always("noise");
  EXPECT_THROW(s.check(), Error);
}

}  // namespace
}  // namespace stoker::data
