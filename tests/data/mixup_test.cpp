// Mixup and CutMix (data/mixup.h): the box and lambda arithmetic against hand-computed cases, each
// mode's draws, the mixed inputs and soft targets, and the determinism of the batch operation.
#include "data/mixup.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>

#include "common/error.h"
#include "data/augmented_source.h"
#include "data/tensor_batches.h"
#include "golden/timm_golden.h"

namespace stoker::data {
namespace {

torch::Tensor images(int64_t b, int64_t h = 6, int64_t w = 8) {
  return torch::arange(b * 2 * h * w, torch::kFloat32).view({b, 2, h, w}) / 100.0;
}

TEST(Mixup, CutmixBoxIsTimmsRandBboxByHand) {
  // 10 x 10, lam 0.64: sides int(10 * 0.6) = 6, half 3; centre (1, 8): rows [-2, 4) -> [0, 4),
  // columns [5, 11) -> [5, 10). The box covers 4 x 5 = 20 pixels: corrected lam 1 - 20/100 = 0.8.
  const CutBox b = cutmix_box(10, 10, 0.64, 1, 8);
  EXPECT_EQ(b.yl, 0);
  EXPECT_EQ(b.yh, 4);
  EXPECT_EQ(b.xl, 5);
  EXPECT_EQ(b.xh, 10);
  EXPECT_DOUBLE_EQ(box_lambda(b, 10, 10), 0.8);
  // Not clipped: 6 x 8 at lam 0.75: sides int(3) = 3 and int(4) = 4: rows [3 - 1, 3 + 2), columns
  // [4 - 2, 4 + 2): 3 x 4 = 12 pixels, lam 1 - 12/48 = 0.75 exactly.
  const CutBox c = cutmix_box(6, 8, 0.75, 3, 4);
  EXPECT_EQ(c.yl, 2);
  EXPECT_EQ(c.yh, 5);
  EXPECT_EQ(c.xl, 2);
  EXPECT_EQ(c.xh, 6);
  EXPECT_DOUBLE_EQ(box_lambda(c, 6, 8), 0.75);
}

TEST(Mixup, BoxesAndTargetsEqualTimms) {
  for (const golden::TimmBox& g : golden::kTimmBoxes) {
    const CutBox b = cutmix_box(g.height, g.width, g.lam, g.cy, g.cx);
    EXPECT_EQ(b.yl, g.yl) << g.height << "x" << g.width << " lam " << g.lam;
    EXPECT_EQ(b.yh, g.yh) << g.height << "x" << g.width << " lam " << g.lam;
    EXPECT_EQ(b.xl, g.xl) << g.height << "x" << g.width << " lam " << g.lam;
    EXPECT_EQ(b.xh, g.xh) << g.height << "x" << g.width << " lam " << g.lam;
    EXPECT_NEAR(box_lambda(b, g.height, g.width), g.corrected_lam, 1e-12);
  }
  const torch::Tensor labels = torch::tensor(golden::kTimmLabels, torch::kLong);
  const int64_t n = labels.size(0);
  const torch::Tensor x = torch::zeros({n, 1, 2, 2});
  for (const golden::TimmTargets& g : golden::kTimmTargets) {
    MixDraw d;
    d.lam = g.lam;
    const torch::Tensor t = apply_mix(std::vector<MixDraw>(n, d), x, labels, golden::kTimmClasses, g.smoothing).second;
    const torch::Tensor want = torch::tensor(g.rows, torch::kFloat64).view({n, golden::kTimmClasses});
    EXPECT_TRUE(torch::allclose(t.to(torch::kFloat64), want, 0, 1e-6)) << g.name << "\n" << t;
  }
  std::vector<MixDraw> elem(n);
  for (int64_t i = 0; i < n; ++i) elem[i].lam = golden::kTimmElemLams[i];
  const torch::Tensor t = apply_mix(elem, x, labels, golden::kTimmClasses, 0.1).second;
  const torch::Tensor want = torch::tensor(golden::kTimmElemRows, torch::kFloat64).view({n, golden::kTimmClasses});
  EXPECT_TRUE(torch::allclose(t.to(torch::kFloat64), want, 0, 1e-6)) << t;
}

TEST(Mixup, BatchMixupBlendsWithTheMirroredBatchAndMixesTargets) {
  const torch::Tensor x = images(4);
  const torch::Tensor y = torch::tensor({0, 1, 2, 1}, torch::kLong);
  MixDraw d;
  d.lam = 0.7;
  const auto [out, t] = apply_mix(std::vector<MixDraw>(4, d), x, y, 3, 0.1);
  EXPECT_TRUE(torch::allclose(out, x * 0.7 + x.flip(0) * 0.3));
  // off = 0.1 / 3, on = 0.9 + off. Sample 0 (class 0) is mixed with sample 3 (class 1).
  const double off = 0.1 / 3, on = 0.9 + off;
  const torch::Tensor want0 = torch::tensor({0.7 * on + 0.3 * off, 0.7 * off + 0.3 * on, off}, torch::kFloat32);
  EXPECT_TRUE(torch::allclose(t[0], want0)) << t[0];
  // Sample 1 (class 1) with sample 2 (class 2).
  const torch::Tensor want1 = torch::tensor({off, 0.7 * on + 0.3 * off, 0.7 * off + 0.3 * on}, torch::kFloat32);
  EXPECT_TRUE(torch::allclose(t[1], want1)) << t[1];
  EXPECT_TRUE(torch::allclose(t.sum(1), torch::ones({4})));
  EXPECT_EQ(t.scalar_type(), torch::kFloat32);
}

TEST(Mixup, BatchCutmixPastesTheBoxAndCorrectsLam) {
  const torch::Tensor x = images(4);
  const torch::Tensor y = torch::tensor({0, 1, 2, 1}, torch::kLong);
  MixDraw d;
  d.cutmix = true;
  d.box = cutmix_box(6, 8, 0.75, 3, 4);  // rows [2, 5), columns [2, 6)
  d.lam = box_lambda(d.box, 6, 8);
  const auto [out, t] = apply_mix(std::vector<MixDraw>(4, d), x, y, 3, 0.0);
  const torch::Tensor inside = out.slice(2, 2, 5).slice(3, 2, 6);
  EXPECT_TRUE(torch::equal(inside, x.flip(0).slice(2, 2, 5).slice(3, 2, 6)));
  torch::Tensor outside = out.clone();
  outside.slice(2, 2, 5).slice(3, 2, 6).zero_();
  torch::Tensor orig = x.clone();
  orig.slice(2, 2, 5).slice(3, 2, 6).zero_();
  EXPECT_TRUE(torch::equal(outside, orig));
  // Without smoothing: lam of the own class, 1 - lam of the partner's (36/48 and 12/48).
  EXPECT_NEAR(t[0][0].item<double>(), 36.0 / 48.0, 1e-6);
  EXPECT_NEAR(t[0][1].item<double>(), 12.0 / 48.0, 1e-6);
  EXPECT_TRUE(torch::equal(x, images(4))) << "the input batch itself must not change";
}

TEST(Mixup, ElemModeDrawsOneLamPerSampleAndMixesEachRowWithIt) {
  MixupSettings s;
  s.mixup_alpha = 1.0;
  s.mode = "elem";
  const std::vector<MixDraw> draws = draw_mix(s, 6, 6, 8, 1234);
  std::set<double> lams;
  for (const MixDraw& d : draws) {
    EXPECT_FALSE(d.cutmix);
    EXPECT_GT(d.lam, 0.0);
    EXPECT_LT(d.lam, 1.0);
    lams.insert(d.lam);
  }
  EXPECT_EQ(lams.size(), 6u) << "each sample has its own lam";
  const torch::Tensor x = images(6);
  const torch::Tensor y = torch::tensor({0, 1, 2, 3, 4, 0}, torch::kLong);
  const auto [out, t] = apply_mix(draws, x, y, 5, 0.0);
  for (int64_t i = 0; i < 6; ++i) {
    const double l = draws[i].lam;
    EXPECT_TRUE(torch::allclose(out[i], x[i] * l + x[5 - i] * (1 - l), 1e-5, 1e-6)) << i;
    EXPECT_NEAR(t[i][y[i].item<int64_t>()].item<double>(), i == 0 || i == 5 ? 1.0 : l, 1e-6) << i;
  }
}

TEST(Mixup, PairModeSharesEachDrawWithTheMirrorSample) {
  MixupSettings s;
  s.mixup_alpha = 0.8;
  s.cutmix_alpha = 1.0;
  s.mode = "pair";
  const std::vector<MixDraw> draws = draw_mix(s, 7, 6, 8, 99);
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(draws[i].lam, draws[6 - i].lam);
    EXPECT_EQ(draws[i].cutmix, draws[6 - i].cutmix);
  }
  EXPECT_EQ(draws[3].lam, 1.0) << "the middle sample of an odd batch stays unmixed in pair mode";
  // The batch mode draws once for all.
  s.mode = "batch";
  const std::vector<MixDraw> batch = draw_mix(s, 5, 6, 8, 99);
  for (const MixDraw& d : batch) EXPECT_EQ(d.lam, batch[0].lam);
}

TEST(Mixup, ProbabilityAndSwitchAreHonoured) {
  MixupSettings s;
  s.mixup_alpha = 0.2;
  s.cutmix_alpha = 1.0;
  s.mode = "elem";
  s.prob = 0.5;
  s.switch_prob = 0.25;
  const std::vector<MixDraw> draws = draw_mix(s, 4000, 32, 32, 5);
  int64_t mixed = 0, cut = 0;
  for (const MixDraw& d : draws) {
    mixed += d.lam < 1.0;
    cut += d.cutmix;
    if (d.cutmix) EXPECT_DOUBLE_EQ(d.lam, box_lambda(d.box, 32, 32));
  }
  // Fixed seed, so fixed counts; the bounds are 5 standard deviations around 2000 and 500.
  EXPECT_NEAR(static_cast<double>(mixed), 2000.0, 160.0);
  EXPECT_NEAR(static_cast<double>(cut), 500.0, 120.0);
  s.prob = 0.0;
  for (const MixDraw& d : draw_mix(s, 8, 32, 32, 5)) EXPECT_EQ(d.lam, 1.0);
}

TEST(Mixup, MinmaxBoxesStayInsideTheirRange) {
  MixupSettings s;
  s.cutmix_minmax = {0.25, 0.5};
  s.mode = "elem";
  for (const MixDraw& d : draw_mix(s, 200, 16, 20, 3)) {
    ASSERT_TRUE(d.cutmix);
    EXPECT_GE(d.box.yh - d.box.yl, 4);
    EXPECT_LT(d.box.yh - d.box.yl, 8);
    EXPECT_GE(d.box.xh - d.box.xl, 5);
    EXPECT_LT(d.box.xh - d.box.xl, 10);
    EXPECT_GE(d.box.yl, 0);
    EXPECT_LE(d.box.yh, 16);
    EXPECT_LE(d.box.xh, 20);
  }
  s.cutmix_alpha = 0.5;
  EXPECT_THROW(s.check(), Error);
  s.cutmix_alpha = 0;
  s.cutmix_minmax = {0.5, 0.25};
  EXPECT_THROW(s.check(), Error);
}

TEST(Mixup, BetaSamplesHaveTheBetaMoments) {
  SampleRng rng(77);
  for (const double a : {0.2, 1.0, 2.0}) {
    double sum = 0, sq = 0;
    const int n = 20000;
    for (int i = 0; i < n; ++i) {
      const double v = beta_sample(rng, a);
      ASSERT_GE(v, 0.0);
      ASSERT_LE(v, 1.0);
      sum += v;
      sq += v * v;
    }
    const double mean = sum / n, var = sq / n - mean * mean;
    EXPECT_NEAR(mean, 0.5, 0.01) << a;
    EXPECT_NEAR(var, 1.0 / (4.0 * (2.0 * a + 1.0)), 0.006) << a;
  }
}

TEST(Mixup, TheBatchOperationIsAFunctionOfSeedEpochAndBatch) {
  MixupSettings s;
  s.mixup_alpha = 0.8;
  s.cutmix_alpha = 1.0;
  const BatchOp op = mixup_op(s, 3, 0.1, 42);
  auto run = [&](int64_t epoch, int64_t index) {
    Batch b;
    b.input = images(4);
    b.target = torch::tensor({0, 1, 2, 1}, torch::kLong);
    b.index = index;
    op(b, epoch);
    return b;
  };
  const Batch a = run(1, 5), again = run(1, 5), other = run(1, 6), later = run(2, 5);
  EXPECT_TRUE(torch::equal(a.input, again.input));
  EXPECT_TRUE(torch::equal(a.target, again.target));
  EXPECT_FALSE(torch::equal(a.target, other.target));
  EXPECT_FALSE(torch::equal(a.target, later.target));
  EXPECT_EQ(a.target.sizes(), (torch::IntArrayRef{4, 3}));
}

TEST(Mixup, AnAugmentedSourceMixesEveryBatchAndForwardsTheRest) {
  const torch::Tensor x = torch::randn({8, 1, 4, 4});
  const torch::Tensor y = torch::tensor({0, 1, 2, 0, 1, 2, 0, 1}, torch::kLong);
  auto inner = std::make_shared<TensorBatches>(x, y, 4, torch::kCPU, /*shuffle=*/false);
  MixupSettings s;
  s.mixup_alpha = 1.0;
  AugmentedSource source(inner, {mixup_op(s, 3, 0.0, 1)});
  EXPECT_EQ(source.num_batches(), 2);
  EXPECT_EQ(source.channels(), 1);
  source.start_epoch(0);
  int64_t n = 0;
  while (std::optional<Batch> b = source.next()) {
    EXPECT_EQ(b->target.sizes(), (torch::IntArrayRef{4, 3}));
    EXPECT_TRUE(torch::allclose(b->target.sum(1), torch::ones({4})));
    ++n;
  }
  EXPECT_EQ(n, 2);
}

}  // namespace
}  // namespace stoker::data
