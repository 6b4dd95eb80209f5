// Top-k counting on hand-made logits, epoch metrics by name, excluded samples (trainer/evaluate.h).
// Checkpoint evaluation (`trainer eval`, `predict`) is tests/recipe/tasks_test.cpp.
#include "trainer/evaluate.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "data/tensor_batches.h"
#include "test_util.h"

namespace stoker {
namespace {

TEST(Evaluate, TopKOnHandMadeLogits) {
  // 7 classes; the target's rank in each row (0 = highest): 0, 1, 4, 5, 6.
  const torch::Tensor logits = torch::tensor({{9.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0},
                                              {1.0, 9.0, 2.0, 3.0, 4.0, 5.0, 6.0},
                                              {7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0},
                                              {7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0},
                                              {7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0}});
  const torch::Tensor target = torch::tensor({0, 6, 4, 5, 6}, torch::kInt64);
  EXPECT_EQ(count_topk_correct(logits, target, 1).item<int64_t>(), 1);
  EXPECT_EQ(count_topk_correct(logits, target, 2).item<int64_t>(), 2);
  EXPECT_EQ(count_topk_correct(logits, target, 5).item<int64_t>(), 3);
  EXPECT_EQ(count_topk_correct(logits, target, 6).item<int64_t>(), 4);
  // k beyond the number of classes counts every row.
  EXPECT_EQ(count_topk_correct(logits.slice(1, 0, 3), torch::tensor({2, 1, 0, 0, 1}, torch::kInt64), 5).item<int64_t>(), 5);
  EXPECT_THROW(count_topk_correct(logits, target.slice(0, 0, 3), 5), Error);
}

TEST(Evaluate, EpochMetricsByName) {
  EpochResult r;
  r.test = {0.5, 0.8, 0.95, 100};
  EXPECT_EQ(epoch_metric(r, "test_loss"), 0.5);
  EXPECT_EQ(epoch_metric(r, "test_top1"), 0.8);
  EXPECT_EQ(epoch_metric(r, "test_top5"), 0.95);
  EXPECT_TRUE(std::isnan(epoch_metric(r, "ema_test_top1"))) << "no EMA evaluated";
  r.ema_test = {0.4, 0.85, 0.97, 100};
  EXPECT_EQ(epoch_metric(r, "ema_test_loss"), 0.4);
  EXPECT_EQ(epoch_metric(r, "ema_test_top5"), 0.97);
  EXPECT_THROW(epoch_metric(r, "train_loss"), Error);
  EXPECT_TRUE(higher_is_better("test_top5"));
  EXPECT_TRUE(higher_is_better("ema_test_top1"));
  EXPECT_FALSE(higher_is_better("ema_test_loss"));
  EXPECT_FALSE(higher_is_better("test_loss"));
}

// Logits as the inputs of an in-memory source (evaluated with the identity as the model), in
// batches of `batch` in their order.
data::TensorBatches logit_batches(const torch::Tensor& logits, std::vector<int64_t> target, int64_t batch) {
  return data::TensorBatches(logits, torch::tensor(target, torch::kInt64), batch, torch::kCPU, /*shuffle=*/false);
}

// Samples with target kExcludedTarget (unreadable) count in no metric: the result equals an
// evaluation of the other samples alone, and says how many were left out.
TEST(Evaluate, ExcludedSamplesCountInNoMetric) {
  torch::manual_seed(5);
  const torch::Tensor logits = torch::randn({6, 7});
  const int64_t x = data::kExcludedTarget;
  data::TensorBatches with_excluded = logit_batches(logits, {2, x, 4, 0, x, 3}, 3);
  data::TensorBatches readable = logit_batches(logits.index({torch::tensor({0, 2, 3, 5})}), {2, 4, 0, 3}, 4);
  const auto identity = [](const torch::Tensor& t) { return t; };
  const EvalResult r = evaluate_model(identity, with_excluded);
  const EvalResult expected = evaluate_model(identity, readable);
  EXPECT_EQ(r.samples, 4);
  EXPECT_EQ(r.excluded, 2);
  EXPECT_EQ(expected.excluded, 0);
  EXPECT_NEAR(r.loss, expected.loss, 1e-6);
  EXPECT_EQ(r.top1, expected.top1);
  EXPECT_EQ(r.top5, expected.top5);
  data::TensorBatches none_readable = logit_batches(logits.slice(0, 0, 2), {x, x}, 2);
  EXPECT_CONTAINS(stoker::testing::error_of([&] { evaluate_model(identity, none_readable); }),
                  "all 2 evaluation samples were unreadable");
}

}  // namespace
}  // namespace stoker
