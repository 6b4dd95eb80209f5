// The losses (trainer/losses.h) on class indices and on soft targets, against the formulas computed
// here with torch ops and torch.nn.functional on the same small input, and the loss: section.
#include "trainer/losses.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "common/error.h"
#include "golden/timm_golden.h"

namespace stoker {
namespace {

namespace F = torch::nn::functional;

// A fixed small input: 4 samples, 5 classes.
torch::Tensor logits() {
  return torch::tensor({{1.5, -0.5, 0.25, 2.0, -1.0},
                        {0.0, 0.5, -2.0, 1.0, 3.0},
                        {-1.25, 0.75, 0.5, -0.5, 0.0},
                        {2.5, 1.0, -1.5, 0.0, 0.5}},
                       torch::kFloat32);
}
torch::Tensor labels() { return torch::tensor({3, 4, 1, 0}, torch::kLong); }

double value(const torch::Tensor& t) { return t.item<double>(); }

TEST(Losses, HandComputedTwoClassCase) {
  // Equal logits: each class has probability 1/2 and sigmoid(0) = 1/2, so both losses are log 2.
  const torch::Tensor x = torch::zeros({1, 2});
  const torch::Tensor y = torch::tensor({0}, torch::kLong);
  EXPECT_NEAR(value(cross_entropy_loss(x, y, 0.0)), std::log(2.0), 1e-7);
  EXPECT_NEAR(value(bce_loss(x, y, 0.0, 0.0)), std::log(2.0), 1e-7);
}

TEST(Losses, SmoothedOneHotIsTimms) {
  const torch::Tensor t = smoothed_one_hot(labels(), 5, 0.1);
  // off = 0.1 / 5 = 0.02, on = 1 - 0.1 + 0.02 = 0.92; each row sums to 1.
  EXPECT_FLOAT_EQ(t[0][3].item<float>(), 0.92f);
  EXPECT_FLOAT_EQ(t[0][0].item<float>(), 0.02f);
  EXPECT_TRUE(torch::allclose(t.sum(1), torch::ones({4})));
  EXPECT_THROW(smoothed_one_hot(torch::zeros({2, 5}), 5, 0.1), Error);
}

TEST(Losses, CrossEntropyOnIndicesAndSoftTargetsMatchesTorch) {
  const torch::Tensor x = logits(), y = labels();
  for (const double s : {0.0, 0.1, 0.3}) {
    const torch::Tensor want = F::cross_entropy(x, y, F::CrossEntropyFuncOptions().label_smoothing(s));
    EXPECT_NEAR(value(cross_entropy_loss(x, y, s)), value(want), 1e-6) << s;
    // Label smoothing on indices is the soft-target loss on the smoothed one-hot rows.
    EXPECT_NEAR(value(cross_entropy_loss(x, smoothed_one_hot(y, 5, s), 0.0)), value(want), 1e-6) << s;
  }
  // Soft targets: torch's cross_entropy with class probabilities, and the formula by hand.
  const torch::Tensor p = torch::softmax(torch::arange(20, torch::kFloat32).view({4, 5}).cos(), 1);
  const double want = value(F::cross_entropy(x, p));
  EXPECT_NEAR(value(cross_entropy_loss(x, p, 0.0)), want, 1e-6);
  EXPECT_NEAR(value((-p * torch::log_softmax(x, 1)).sum(1).mean()), want, 1e-6);
  // Soft targets are taken as they are: the smoothing is not applied again.
  EXPECT_NEAR(value(cross_entropy_loss(x, p, 0.3)), want, 1e-6);
}

TEST(Losses, BinaryCrossEntropyMatchesTorch) {
  const torch::Tensor x = logits(), y = labels();
  for (const double s : {0.0, 0.1}) {
    const torch::Tensor t = F::one_hot(y, 5).to(torch::kFloat32) * (1.0 - s) + s / 5.0;
    // By the formula: mean over samples and classes of max(x, 0) - x t + log(1 + exp(-|x|)).
    const torch::Tensor by_hand = (x.clamp_min(0) - x * t + torch::log1p(torch::exp(-x.abs()))).mean();
    EXPECT_NEAR(value(bce_loss(x, y, s, 0.0)), value(by_hand), 1e-6) << s;
    EXPECT_NEAR(value(bce_loss(x, y, s, 0.0)), value(F::binary_cross_entropy(torch::sigmoid(x), t)), 1e-5) << s;
  }
}

TEST(Losses, BceTargetThresholdMakesTargetsZeroOrOne) {
  const torch::Tensor x = logits();
  // A mixed target: 0.7 of one class, 0.3 of another, nothing elsewhere.
  torch::Tensor t = torch::zeros({4, 5});
  for (int64_t i = 0; i < 4; ++i) {
    t[i][i] = 0.7;
    t[i][i + 1] = 0.3;
  }
  const torch::Tensor both = (t > 0).to(torch::kFloat32);  // threshold 0.2: both classes become 1
  const torch::Tensor one = (t > 0.5).to(torch::kFloat32);  // threshold 0.5: only the 0.7 one
  EXPECT_NEAR(value(bce_loss(x, t, 0.0, 0.2)), value(F::binary_cross_entropy_with_logits(x, both)), 1e-6);
  EXPECT_NEAR(value(bce_loss(x, t, 0.0, 0.5)), value(F::binary_cross_entropy_with_logits(x, one)), 1e-6);
  EXPECT_NEAR(value(bce_loss(x, t, 0.0, 0.0)), value(F::binary_cross_entropy_with_logits(x, t)), 1e-6);
  // On indices with smoothing 0.1 the off value is 0.02: below a 0.2 threshold, so back to one-hot.
  const torch::Tensor hot = F::one_hot(labels(), 5).to(torch::kFloat32);
  EXPECT_NEAR(value(bce_loss(x, labels(), 0.1, 0.2)), value(F::binary_cross_entropy_with_logits(x, hot)), 1e-6);
}

// Must match logits() in tests/golden/timm_golden.py: sin(1.3 i + 0.7) * 3, i row-major.
torch::Tensor timm_logits() {
  const int64_t rows = static_cast<int64_t>(golden::kTimmLabels.size()), classes = golden::kTimmClasses;
  torch::Tensor x = torch::empty({rows, classes});
  for (int64_t i = 0; i < rows * classes; ++i) {
    x.view({-1})[i] = std::sin(1.3 * static_cast<double>(i) + 0.7) * 3;
  }
  return x;
}

TEST(Losses, EqualTimmsBinaryAndSoftTargetCrossEntropy) {
  const torch::Tensor x = timm_logits();
  const torch::Tensor labels = torch::tensor(golden::kTimmLabels, torch::kLong);
  const torch::Tensor soft = torch::tensor(golden::kTimmTargets[0].rows, torch::kFloat64)
                                 .to(torch::kFloat32)
                                 .view({labels.size(0), golden::kTimmClasses});
  for (const golden::TimmLoss& g : golden::kTimmLosses) {
    TypedOptions type("cross_entropy", std::make_unique<NoOptions>());
    if (std::string(g.type) == "bce") {
      auto keys = std::make_unique<BceKeys>();
      keys->target_threshold = g.target_threshold;
      type = TypedOptions("bce", std::move(keys));
    }
    const LossFunction loss = make_loss(type, g.smoothing);
    EXPECT_NEAR(value(loss(x, g.soft ? soft : labels)), g.loss, 1e-6 * std::max(1.0, std::abs(g.loss))) << g.name;
  }
}

TEST(Losses, SoftTargetsOfTheWrongShapeAreRefused) {
  try {
    cross_entropy_loss(logits(), torch::zeros({4, 3}), 0.0);
    FAIL() << "accepted soft targets of 3 classes for 5 logits";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[N, C] = [4, 5]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(bce_loss(logits(), torch::zeros({2, 5}), 0.0, 0.0), Error);
}

}  // namespace
}  // namespace stoker
