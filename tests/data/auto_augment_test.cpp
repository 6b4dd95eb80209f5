// RandAugment and TrivialAugmentWide as transforms: their draws, their options and errors, their
// place in a pipeline, and batches that do not depend on the worker count or a mid-epoch resume.
#include "data/auto_augment.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>
#include <vector>

#include "common/error.h"
#include "data/loader.h"
#include "data/transform_options.h"
#include "test_util.h"

namespace stoker::data {
namespace {

std::vector<uint8_t> pattern(int64_t h, int64_t w, int64_t c) {
  std::vector<uint8_t> out(static_cast<size_t>(h * w * c));
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>((i * 37 + (i / 7) * 11) % 251);
  return out;
}

std::vector<uint8_t> augmented(const PixelTransform& t, uint64_t seed, int64_t c = 3) {
  std::vector<uint8_t> im = pattern(16, 20, c);
  SampleRng rng(seed);
  t.apply(PixelView{im.data(), 16, 20, c}, rng);
  return im;
}

TEST(RandAugment, SameSeedSameImageAndSeedsDrawDifferentOps) {
  const RandAugment ra(RandAugmentSettings{});
  std::set<std::vector<uint8_t>> outputs;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    EXPECT_EQ(augmented(ra, seed), augmented(ra, seed)) << seed;
    outputs.insert(augmented(ra, seed));
  }
  // 14 ops, two of them, signed magnitudes: 40 seeds give many different images.
  EXPECT_GE(outputs.size(), 25u);
  const TrivialAugmentWide ta;
  std::set<std::vector<uint8_t>> wide;
  for (uint64_t seed = 0; seed < 40; ++seed) wide.insert(augmented(ta, seed, 1));
  EXPECT_GE(wide.size(), 20u);
}

TEST(RandAugment, NoOpsOrProbabilityZeroLeaveTheImage) {
  RandAugmentSettings none;
  none.ops = 0;
  RandAugmentSettings never;
  never.p = 0;
  never.magnitude_std = 0.5;
  for (uint64_t seed = 0; seed < 10; ++seed) {
    EXPECT_EQ(augmented(RandAugment(none), seed), pattern(16, 20, 3));
    EXPECT_EQ(augmented(RandAugment(never), seed), pattern(16, 20, 3));
  }
}

TEST(RandAugment, TimmPolicyStringsMapToTimmsScale) {
  const RandAugmentSettings s = parse_timm_rand_augment("rand-m9-n2-mstd0.5", 31);
  EXPECT_EQ(s.ops, 2);
  EXPECT_DOUBLE_EQ(s.magnitude, 27.0);
  EXPECT_DOUBLE_EQ(s.magnitude_std, 1.5);
  EXPECT_DOUBLE_EQ(s.p, 0.5);
  const RandAugmentSettings a3 = parse_timm_rand_augment("rand-m6-mstd0.5-inc1", 31);
  EXPECT_DOUBLE_EQ(a3.magnitude, 18.0);
  EXPECT_EQ(a3.ops, 2);
  EXPECT_CONTAINS(testing::error_of([] { parse_timm_rand_augment("rand-m9-inc0", 31); }), "inc1");
  EXPECT_CONTAINS(testing::error_of([] { parse_timm_rand_augment("rand-m9-w0", 31); }), "'w' is not supported");
  EXPECT_CONTAINS(testing::error_of([] { parse_timm_rand_augment("augmix-m5", 31); }), "starts with 'rand-'");
  EXPECT_CONTAINS(testing::error_of([] { parse_timm_rand_augment("rand-m12", 31); }), "m must be in [0, 10]");
  EXPECT_CONTAINS(testing::error_of([] { parse_timm_rand_augment("rand-mx", 31); }), "'mx'");
}

TEST(RandAugment, OptionErrorsNameTheKey) {
  TypedOptions t = make_transform("rand_augment");
  t.as<RandAugmentOptions>().magnitude = 31;
  EXPECT_CONTAINS(testing::error_of([&] { make_transform_pipeline({t}); }),
                  "transforms[0] (rand_augment): 'magnitude' is a bin in [0, num_magnitude_bins - 1] = [0, 30], got 31");
  t = make_transform("rand_augment");
  t.as<RandAugmentOptions>().policy = "rand-m9-n3";
  t.as<RandAugmentOptions>().ops = 3;
  EXPECT_CONTAINS(testing::error_of([&] { make_transform_pipeline({t}); }), "either 'policy' or 'ops'");
  t = make_transform("rand_augment");
  t.as<RandAugmentOptions>().policy = "rand-m9-x2";
  EXPECT_CONTAINS(testing::error_of([&] { make_transform_pipeline({t}); }), "'x' is not supported");
}

TEST(RandAugment, GeometricTransformsMustComeBeforePixelTransforms) {
  TypedOptions crop = make_transform("center_crop");
  crop.as<CenterCropOptions>().size = 8;
  EXPECT_NO_THROW(make_transform_pipeline({crop, make_transform("rand_augment")}));
  EXPECT_CONTAINS(testing::error_of([&] { make_transform_pipeline({make_transform("trivial_augment_wide"), crop}); }),
                  "transforms[1] is a geometric transform after the pixel transform transforms[0]");
  const TransformPipeline p = make_transform_pipeline({crop, make_transform("rand_augment")});
  EXPECT_TRUE(p.has_pixel_transforms());
  EXPECT_EQ(p.output_size(20, 30), (std::pair<int64_t, int64_t>{8, 8}));
}

// n 3-channel images of size x size with distinct pixels.
std::shared_ptr<TensorImageDataset> rgb_ramp(int64_t n, int64_t size) {
  std::vector<uint8_t> pixels(static_cast<size_t>(n * size * size * 3));
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>((i * 7 + i / 13) % 251);
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[size_t(i)] = i % 10;
  return std::make_shared<TensorImageDataset>(std::move(pixels), std::move(labels), size, size, 3, 10, "rgb ramp");
}

LoaderOptions rand_augmenting(int64_t workers, bool augment) {
  LoaderOptions o;
  o.batch_size = 8;
  o.mean = {0.0, 0.0, 0.0};
  o.std = {1.0 / 255.0, 1.0 / 255.0, 1.0 / 255.0};
  o.seed = 5;
  o.workers = workers;
  TypedOptions crop = make_transform("random_crop");
  crop.as<RandomCropOptions>().size = 12;
  crop.as<RandomCropOptions>().padding = 2;
  TypedOptions ra = make_transform("rand_augment");
  ra.as<RandAugmentOptions>().magnitude_std = 0.5;
  o.transforms = {crop, make_transform("horizontal_flip")};
  if (augment) o.transforms.push_back(ra);
  return o;
}

using testing::epoch_of;

TEST(RandAugment, SameBatchesForZeroAndTwoWorkersAndAfterAMidEpochResume) {
  Loader inline_loader(rgb_ramp(48, 12), rand_augmenting(0, true));
  Loader threaded(rgb_ramp(48, 12), rand_augmenting(2, true));
  Loader plain(rgb_ramp(48, 12), rand_augmenting(0, false));
  const auto a = epoch_of(inline_loader, 1);
  const auto b = epoch_of(threaded, 1);
  const auto resumed = epoch_of(threaded, 1, 3);
  const auto without = epoch_of(plain, 1);
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), a.size());
  ASSERT_EQ(resumed.size(), a.size() - 3);
  int64_t augmented_batches = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::equal(b[i].input, a[i].input)) << "batch " << i;
    EXPECT_TRUE(torch::equal(b[i].target, a[i].target)) << "batch " << i;
    if (i >= 3) EXPECT_TRUE(torch::equal(resumed[i - 3].input, a[i].input)) << "resumed batch " << i;
    augmented_batches += torch::equal(without[i].input, a[i].input) ? 0 : 1;
  }
  EXPECT_EQ(augmented_batches, 6) << "RandAugment should change every batch";
}

}  // namespace
}  // namespace stoker::data
