// Top-k counting on hand-made logits and epoch metrics by name.
#include "trainer/evaluate.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

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

}  // namespace
}  // namespace stoker
