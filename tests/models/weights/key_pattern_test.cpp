// models/weights/key_pattern.h: the patterns of model.freeze, model.pretrained_skip and the head keys.
#include "models/weights/key_pattern.h"

#include <gtest/gtest.h>

namespace stoker::models::weights {
namespace {

TEST(KeyPattern, AModuleNameMatchesItsKeysButNotAnotherWithThatPrefix) {
  EXPECT_TRUE(key_matches("fc", "fc.weight"));
  EXPECT_TRUE(key_matches("fc.", "fc.bias"));
  EXPECT_FALSE(key_matches("fc", "fc2.weight"));
  EXPECT_TRUE(key_matches("layer1", "layer1.0.conv1.weight"));
  EXPECT_FALSE(key_matches("layer1", "layer10.0.conv1.weight"));
  EXPECT_TRUE(key_matches("layer1.0.bn1.weight", "layer1.0.bn1.weight"));
  EXPECT_FALSE(key_matches("layer1.0.bn1.weight", "layer1.0.bn1.bias"));
  EXPECT_FALSE(key_matches("", "fc.weight"));
}

TEST(KeyPattern, GlobsMatchAcrossDots) {
  EXPECT_TRUE(key_matches("*.bn1", "layer2.1.bn1.running_mean"));
  EXPECT_FALSE(key_matches("*.bn1", "bn1.weight"));  // "*." needs something before the dot
  EXPECT_TRUE(key_matches("bn*", "bn1.weight"));
  EXPECT_TRUE(key_matches("*running_*", "layer1.0.bn2.running_var"));
  EXPECT_TRUE(key_matches("layer?", "layer4.1.conv2.weight"));
  EXPECT_FALSE(key_matches("layer?", "layer10.weight"));
  EXPECT_TRUE(key_matches("features.stage*_block0", "features.stage2_block0.conv1.weight"));
  EXPECT_TRUE(key_matches_any({"conv1", "bn1"}, "bn1.bias"));
  EXPECT_FALSE(key_matches_any({}, "bn1.bias"));
}

TEST(KeyPattern, UnmatchedPatternsAreNamedAndLongListsCounted) {
  EXPECT_EQ(unmatched_patterns({"fc", "layr1", "conv*"}, {"conv1.weight", "fc.weight"}),
            (std::vector<std::string>{"layr1"}));
  std::vector<std::string> many;
  for (int i = 0; i < 13; ++i) many.push_back("k" + std::to_string(i));
  EXPECT_EQ(list_some(many), "k0, k1, k2, k3, k4, k5, k6, k7, k8, k9 and 3 more");
  EXPECT_EQ(list_some({"a", "b"}), "a, b");
}

}  // namespace
}  // namespace stoker::models::weights
