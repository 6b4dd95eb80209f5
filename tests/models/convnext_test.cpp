// The torchvision-compatible ConvNeXts (models/convnext.h): names, shapes and initialisation as
// torchvision's, logits and FLOPs against torchvision's checked in (tests/golden/vit_convnext_golden.h),
// stochastic depth, and, live through the venv's Python, weights both ways and the named models'
// parameter counts (the ConvNextPython tests).
#include "models/convnext.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "golden/vit_convnext_golden.h"
#include "models/flops.h"
#include "models/registry.h"
#include "models/torchvision_golden.h"
#include "recipe/config.h"
#include "test_util.h"

namespace stoker::models {
namespace {
using namespace testing;  // NOLINT: the shared golden helpers (models/torchvision_golden.h)
using stoker::testing::error_of;

// The golden's small ConvNeXt: widths 8/16/24/32, depths 1/1/2/1.
const char* kSmallConvNext = "{type: convnext, widths: [8, 16, 24, 32], depths: [1, 1, 2, 1]}";

torch::nn::AnyModule small_convnext(const std::string& extra = "", int64_t height = 64, int64_t width = 48) {
  std::string yaml = kSmallConvNext;
  if (!extra.empty()) yaml.insert(yaml.size() - 1, ", " + extra);
  return create_model(parse_config("model: " + yaml + "\n", "convnext.yaml").model, {3, 10, height, width});
}

TEST(ConvNext, NamesAndShapesEqualTorchvisionsStateDictKeys) {
  torch::nn::AnyModule model = small_convnext();
  const auto s = state_map(*model.ptr());
  EXPECT_EQ(s.size(), 65u);  // len(ConvNeXt([(8,16,1), (16,24,1), (24,32,2), (32,None,1)]).state_dict())
  const std::map<std::string, std::vector<int64_t>> expected{
      {"features.0.0.weight", {8, 3, 4, 4}},
      {"features.0.0.bias", {8}},
      {"features.0.1.weight", {8}},
      {"features.1.0.layer_scale", {8, 1, 1}},
      {"features.1.0.block.0.weight", {8, 1, 7, 7}},
      {"features.1.0.block.0.bias", {8}},
      {"features.1.0.block.2.weight", {8}},
      {"features.1.0.block.3.weight", {32, 8}},
      {"features.1.0.block.5.weight", {8, 32}},
      {"features.1.0.block.5.bias", {8}},
      {"features.2.0.weight", {8}},
      {"features.2.1.weight", {16, 8, 2, 2}},
      {"features.5.1.block.3.bias", {96}},
      {"features.6.1.weight", {32, 24, 2, 2}},
      {"features.7.0.layer_scale", {32, 1, 1}},
      {"classifier.0.weight", {32}},
      {"classifier.0.bias", {32}},
      {"classifier.2.weight", {10, 32}},
      {"classifier.2.bias", {10}}};
  for (const auto& [key, shape] : expected) {
    ASSERT_TRUE(s.count(key)) << key;
    EXPECT_EQ(s.at(key).sizes(), shape) << key;
  }
  EXPECT_FALSE(s.count("features.8.0.weight"));  // no downsampling after the last stage
}

TEST(ConvNext, NamedTypesHaveTorchvisionsArchitecture) {
  EXPECT_EQ(named_convnext("convnext_tiny")->depths, (std::vector<int64_t>{3, 3, 9, 3}));
  EXPECT_EQ(named_convnext("convnext_small")->depths, (std::vector<int64_t>{3, 3, 27, 3}));
  EXPECT_EQ(named_convnext("convnext_base")->widths, (std::vector<int64_t>{128, 256, 512, 1024}));
  EXPECT_FALSE(named_convnext("convnext_huge"));
  torch::nn::AnyModule tiny = create_model(model_options("convnext_tiny"), {3, 1000});
  const auto s = state_map(*tiny.ptr());
  EXPECT_EQ(s.at("features.5.8.block.3.weight").sizes(), (std::vector<int64_t>{1536, 384}));
  EXPECT_FALSE(s.count("features.5.9.block.3.weight"));
  EXPECT_NE(error_of([] { parse_config("model: {type: convnext_tiny, widths: [8]}\n", "r.yaml"); }).find("widths"),
            std::string::npos);
}

TEST(ConvNext, MatchesCheckedInTorchvisionLogitsAndFlops) {
  for (const auto& g : golden::family_goldens()) {
    if (g.model.find("type: convnext") != std::string::npos) expect_matches_family_golden(g);
  }
}

TEST(ConvNext, InitialisedAsTorchvision) {
  torch::manual_seed(0);
  torch::nn::AnyModule model = create_model(model_options("convnext_tiny"), {3, 1000});
  const auto s = state_map(*model.ptr());
  // Truncated normal, std 0.02, for every convolution and linear layer; zero biases; layer scale 1e-6.
  for (const char* key : {"features.0.0.weight", "features.5.4.block.3.weight", "classifier.2.weight"}) {
    EXPECT_NEAR(s.at(key).std().item<double>(), 0.02, 0.001) << key;
    EXPECT_LE(s.at(key).abs().max().item<double>(), 2.0) << key;
  }
  EXPECT_TRUE(s.at("features.5.4.block.0.bias").eq(0).all().item<bool>());
  EXPECT_TRUE(s.at("classifier.2.bias").eq(0).all().item<bool>());
  EXPECT_TRUE(s.at("features.3.1.layer_scale").eq(1e-6f).all().item<bool>());
  EXPECT_TRUE(s.at("features.6.0.weight").eq(1).all().item<bool>());
}

TEST(ConvNext, StochasticDepthRisesLinearlyOverAllBlocks) {
  torch::nn::AnyModule model = small_convnext("drop_path_rate: 0.4");
  std::vector<double> rates;
  for (const auto& m : model.ptr()->modules(false)) {
    if (auto* b = m->as<CNBlockImpl>()) rates.push_back(b->drop_path_rate());
  }
  ASSERT_EQ(rates.size(), 5u);  // torchvision: sd_prob * block_id / (total - 1)
  for (size_t i = 0; i < rates.size(); ++i) EXPECT_DOUBLE_EQ(rates[i], 0.4 * static_cast<double>(i) / 4.0);
  // In training only.
  torch::manual_seed(1);
  torch::nn::AnyModule plain = small_convnext();
  golden_fill(*plain.ptr());
  golden_fill(*model.ptr());
  const torch::Tensor x = torch::randn({4, 3, 64, 48});
  torch::NoGradGuard no_grad;
  plain.ptr()->eval();
  model.ptr()->eval();
  EXPECT_TRUE(torch::allclose(plain.forward(x), model.forward(x)));
  model.ptr()->train();
  EXPECT_FALSE(torch::allclose(plain.forward(x), model.forward(x)));
}

TEST(ConvNext, TooSmallAnInputIsAClearError) {
  const std::string e = error_of([] { small_convnext("", 24, 48); });
  EXPECT_NE(e.find("model.type convnext: the input is 24x48 pixels"), std::string::npos) << e;
  EXPECT_NE(e.find("at least 32x32"), std::string::npos) << e;
  EXPECT_THROW(parse_config("model: {type: convnext, widths: [8, 16], depths: [1]}\n", "r.yaml"), Error);
  // Any size from 32 up; grayscale too.
  torch::nn::AnyModule gray = create_model(parse_config(std::string("model: ") + kSmallConvNext + "\n", "r.yaml").model,
                                           {1, 4, 0, 0});
  EXPECT_EQ(gray.forward(torch::randn({2, 1, 40, 36})).sizes(), (std::vector<int64_t>{2, 4}));
}

TEST(ConvNext, ChannelsLastGivesTheSameLogits) {
  torch::manual_seed(2);
  torch::nn::AnyModule model = small_convnext();
  golden_fill(*model.ptr());
  model.ptr()->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor x = torch::randn({2, 3, 64, 48});
  const torch::Tensor plain = model.forward(x);
  for (auto& p : model.ptr()->parameters()) {
    if (p.dim() == 4) p.set_data(p.contiguous(torch::MemoryFormat::ChannelsLast));
  }
  const torch::Tensor cl = model.forward(x.contiguous(torch::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(torch::allclose(plain, cl, 1e-4, 1e-4));
}

// ---------------------------------------------------------------------------------------------
// Live, through the venv's Python (tests/golden/vit_convnext_golden.py make|check|count).

class ConvNextPython : public FamilyPython {};

TEST_F(ConvNextPython, LoadsTorchvisionWeightsAndMatchesItsLogits) {
  torch::nn::AnyModule model = small_convnext();
  expect_loads_torchvision_weights(model, "convnext");
}

TEST_F(ConvNextPython, TorchvisionLoadsStokerWeightsAndMatchesOurLogits) {
  torch::nn::AnyModule model = small_convnext();
  expect_torchvision_loads_ours(model, "convnext");
}

TEST_F(ConvNextPython, ParameterCountsEqualTorchvisions) {
  const std::map<std::string, int64_t> torchvision = counts(run("count"));
  for (const char* type : {"convnext_tiny", "convnext_small", "convnext_base"}) {
    ASSERT_TRUE(torchvision.count(type)) << type;
    torch::nn::AnyModule model = create_model(model_options(type), {3, 1000});
    EXPECT_EQ(parameter_count(*model.ptr()), torchvision.at(type)) << type;
  }
}

}  // namespace
}  // namespace stoker::models
