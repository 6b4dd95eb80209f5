// The sizing checks (recipe/sizing.h): which batch, channel and feature sizes are not
// tensor-core friendly, and the nearest better values. train.strict_sizes, which turns the findings
// into an error, is tested with the whole run in trainer_test.cpp.
#include "recipe/sizing.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "test_util.h"

namespace stoker {
namespace {

TEST(SizingChecks, NameEachSizeAndTheNearestBetterValue) {
  EXPECT_EQ(nearest_multiple_of_8(100), 104);
  EXPECT_EQ(nearest_multiple_of_8(99), 96);
  EXPECT_EQ(nearest_multiple_of_8(3), 8);
  EXPECT_EQ(nearest_power_of_two(100), 128);
  EXPECT_EQ(nearest_power_of_two(90), 64);
  torch::nn::Sequential net(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 12, 3)), torch::nn::Flatten(),
                            torch::nn::Linear(12, 20), torch::nn::Linear(20, 10));
  const auto findings = check_sizes(*net, 100, /*data_channels=*/3, /*num_classes=*/10);
  ASSERT_EQ(findings.size(), 5u) << ::testing::PrintToString(findings);
  EXPECT_CONTAINS(findings[0], "data.batch_size is 100");
  EXPECT_CONTAINS(findings[0], "128 or 104");
  EXPECT_CONTAINS(findings[1], "layer '0': out_channels is 12, not a multiple of 8; 16");
  EXPECT_CONTAINS(findings[2], "layer '2': in_features is 12");
  EXPECT_CONTAINS(findings[3], "layer '2': out_features is 20, not a multiple of 8; 24");
  EXPECT_CONTAINS(findings[4], "layer '3': in_features is 20");
  // The input channels (3) and the class count (10) are the data's, not the user's: no finding
  // for them. Told the data has 12 channels and 20 classes, layer 0's input (3) and layer 3's
  // output (10) are findings too, and layer 2's output (20) is not.
  const auto other = check_sizes(*net, 64, 12, 20);
  ASSERT_EQ(other.size(), 5u) << ::testing::PrintToString(other);
  EXPECT_CONTAINS(other[0], "in_channels is 3");
  EXPECT_CONTAINS(other[4], "out_features is 10");
}

}  // namespace
}  // namespace stoker
