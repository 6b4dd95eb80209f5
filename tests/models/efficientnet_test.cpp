// torchvision-compatible EfficientNet-B0..B3: parameter counts, names, shapes, batch-norm settings,
// initialisation and keys as torchvision's; logits against torchvision's checked in
// (tests/golden/mobile_golden.h); with the libtorch venv's Python and torchvision, live comparisons
// both ways and parameter counts from torchvision itself (EfficientNetPython).
#include "models/efficientnet.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "models/torchvision_golden.h"
#include "models/mobile_blocks.h"
#include "models/registry.h"
#include "recipe/config.h"

namespace stoker::models {
namespace {
using namespace testing;  // models/torchvision_golden.h
using stoker::testing::error_of;

const std::vector<std::string> kTypes = {"efficientnet_b0", "efficientnet_b1", "efficientnet_b2",
                                         "efficientnet_b3"};

torch::nn::AnyModule build(const std::string& type, int64_t num_classes = 1000, int64_t in_channels = 3) {
  return create_model(model_options(type), {in_channels, num_classes});
}

std::vector<int64_t> shape_of(const std::map<std::string, torch::Tensor>& s, const std::string& key) {
  EXPECT_TRUE(s.count(key)) << key;
  return s.count(key) ? s.at(key).sizes().vec() : std::vector<int64_t>{};
}

TEST(EfficientNet, ParameterCountsEqualTorchvisions) {
  // sum(p.numel() for p in torchvision.models.efficientnet_bN().parameters()), as its weights' meta.
  const std::vector<int64_t> counts = {5'288'548, 7'794'184, 9'109'994, 12'233'232};
  for (size_t i = 0; i < kTypes.size(); ++i) {
    torch::nn::AnyModule model = build(kTypes[i]);
    EXPECT_EQ(parameter_count(*model.ptr()), counts[i]) << kTypes[i];
  }
}

TEST(EfficientNet, NamesAndShapesEqualTorchvisionsStateDictKeys) {
  torch::nn::AnyModule b0 = build("efficientnet_b0");
  const auto s = state_map(*b0.ptr());
  EXPECT_EQ(s.size(), 360u);  // len(torchvision.models.efficientnet_b0().state_dict())
  const std::map<std::string, std::vector<int64_t>> sample{
      {"features.0.0.weight", {32, 3, 3, 3}},
      {"features.0.1.running_var", {32}},
      {"features.0.1.num_batches_tracked", {}},
      // Stage 1, expansion 1: depthwise, SE (32 -> 8 -> 32), project.
      {"features.1.0.block.0.0.weight", {32, 1, 3, 3}},
      {"features.1.0.block.1.fc1.weight", {8, 32, 1, 1}},
      {"features.1.0.block.1.fc1.bias", {8}},
      {"features.1.0.block.1.fc2.weight", {32, 8, 1, 1}},
      {"features.1.0.block.2.0.weight", {16, 32, 1, 1}},
      {"features.1.0.block.2.1.weight", {16}},
      // Stage 2, expansion 6: expand, depthwise, SE to a quarter of the block's input, project.
      {"features.2.0.block.0.0.weight", {96, 16, 1, 1}},
      {"features.2.0.block.1.0.weight", {96, 1, 3, 3}},
      {"features.2.0.block.2.fc1.weight", {4, 96, 1, 1}},
      {"features.2.0.block.3.0.weight", {24, 96, 1, 1}},
      {"features.2.1.block.2.fc1.weight", {6, 144, 1, 1}},
      {"features.3.0.block.1.0.weight", {144, 1, 5, 5}},
      {"features.6.3.block.3.1.running_mean", {192}},
      {"features.7.0.block.3.0.weight", {320, 1152, 1, 1}},
      {"features.8.0.weight", {1280, 320, 1, 1}},
      {"features.8.1.bias", {1280}},
      {"classifier.1.weight", {1000, 1280}},
      {"classifier.1.bias", {1000}}};
  for (const auto& [key, shape] : sample) EXPECT_EQ(shape_of(s, key), shape) << key;
  EXPECT_FALSE(s.count("features.6.4.block.0.0.weight")) << "stage 6 of B0 has 4 blocks";
  EXPECT_FALSE(s.count("features.1.0.block.3.0.weight")) << "expansion 1 has no expand convolution";

  // B3: widths x 1.2 rounded to multiples of 8 (16 -> 24 rather than 16: no more than 10% down),
  // depths x 1.4 rounded up.
  torch::nn::AnyModule b3 = build("efficientnet_b3");
  const auto t = state_map(*b3.ptr());
  EXPECT_EQ(t.size(), 574u);
  EXPECT_EQ(shape_of(t, "features.0.0.weight"), (std::vector<int64_t>{40, 3, 3, 3}));
  EXPECT_EQ(shape_of(t, "features.1.1.block.2.0.weight"), (std::vector<int64_t>{24, 24, 1, 1}));
  EXPECT_EQ(shape_of(t, "features.8.0.weight"), (std::vector<int64_t>{1536, 384, 1, 1}));
  EXPECT_EQ(shape_of(t, "classifier.1.weight"), (std::vector<int64_t>{1000, 1536}));
  EXPECT_TRUE(t.count("features.6.5.block.0.0.weight"));   // ceil(4 x 1.4) = 6 blocks
  EXPECT_FALSE(t.count("features.6.6.block.0.0.weight"));
  EXPECT_EQ(state_map(*build("efficientnet_b1").ptr()).size(), 508u);
  EXPECT_EQ(state_map(*build("efficientnet_b2").ptr()).size(), 508u);
}

TEST(EfficientNet, OutputShapeGrayInputAndBatchNormAsTorchvisions) {
  torch::NoGradGuard no_grad;
  for (const std::string& type : kTypes) {
    torch::nn::AnyModule model = build(type, 7);
    model.ptr()->eval();
    // Any input size: 12x12 shrinks to 1x1 before the pooling.
    EXPECT_EQ(model.forward(torch::randn({2, 3, 12, 12})).sizes(), (std::vector<int64_t>{2, 7})) << type;
  }
  torch::nn::AnyModule gray = build("efficientnet_b0", 10, 1);
  EXPECT_EQ(state_map(*gray.ptr()).at("features.0.0.weight").sizes(), (std::vector<int64_t>{32, 1, 3, 3}));
  EXPECT_EQ(gray.forward(torch::randn({2, 1, 32, 32})).sizes(), (std::vector<int64_t>{2, 10}));
  // B0..B3 keep PyTorch's batch-norm defaults (torchvision gives eps 1e-3 to B4 and up only).
  int64_t norms = 0;
  for (const auto& m : gray.ptr()->modules(false)) {
    if (auto* bn = m->as<torch::nn::BatchNorm2d>()) {
      EXPECT_EQ(bn->options.eps(), 1e-5);
      EXPECT_EQ(bn->options.momentum(), 0.1);
      ++norms;
    }
  }
  EXPECT_EQ(norms, 49);
}

TEST(EfficientNet, InitialisedAsTorchvision) {
  torch::manual_seed(0);
  torch::nn::AnyModule model = build("efficientnet_b0");
  const auto s = state_map(*model.ptr());
  // Kaiming normal, fan_out, gain sqrt(2): std = sqrt(2 / (out_channels * kh * kw)) (fan_out of a
  // depthwise convolution counts its output channels too, as PyTorch computes it).
  EXPECT_NEAR(s.at("features.8.0.weight").std().item<double>(), std::sqrt(2.0 / 1280), 0.0005);
  EXPECT_NEAR(s.at("features.3.0.block.1.0.weight").std().item<double>(), std::sqrt(2.0 / (144 * 25)), 0.001);
  EXPECT_TRUE(s.at("features.1.0.block.1.fc1.bias").eq(0).all().item<bool>());
  EXPECT_TRUE(s.at("features.4.1.block.1.1.weight").eq(1).all().item<bool>());
  EXPECT_TRUE(s.at("features.4.1.block.1.1.bias").eq(0).all().item<bool>());
  // Linear: uniform in +-1/sqrt(out_features), zero bias.
  const double range = 1.0 / std::sqrt(1000.0);
  EXPECT_LE(s.at("classifier.1.weight").abs().max().item<double>(), range);
  EXPECT_GT(s.at("classifier.1.weight").abs().max().item<double>(), 0.99 * range);
  EXPECT_TRUE(s.at("classifier.1.bias").eq(0).all().item<bool>());
}

double dropout_of(torch::nn::AnyModule& model) {
  auto* dropout = model.ptr()->named_modules()["classifier.0"]->as<torch::nn::Dropout>();
  EXPECT_NE(dropout, nullptr);
  return dropout ? dropout->options.p() : -1;
}

std::vector<double> drop_path_rates_of(torch::nn::AnyModule& model) {
  std::vector<double> rates;
  for (const auto& m : model.ptr()->modules(false)) {
    if (auto* b = m->as<InvertedResidualImpl>()) rates.push_back(b->drop_path_rate());
  }
  return rates;
}

// Defaults as torchvision's efficientnet_bN(): stochastic_depth_prob 0.2 spread over the blocks,
// the variant's dropout; both keys reach the network.
TEST(EfficientNet, KeysDefaultToTorchvisionsAndReachTheNetwork) {
  const std::vector<double> dropouts = {0.2, 0.2, 0.3, 0.3};
  for (size_t i = 0; i < kTypes.size(); ++i) {
    const Config c = parse_config("model: {type: " + kTypes[i] + "}\n", "r.yaml");
    torch::nn::AnyModule model = create_model(c.model, {3, 10});
    EXPECT_EQ(dropout_of(model), dropouts[i]) << kTypes[i];
    const std::vector<double> rates = drop_path_rates_of(model);
    ASSERT_GE(rates.size(), 16u);
    EXPECT_DOUBLE_EQ(rates.back(), 0.2 * static_cast<double>(rates.size() - 1) / static_cast<double>(rates.size()));
  }
  const Config c = parse_config("model: {type: efficientnet_b1, dropout: 0.5, drop_path_rate: 0.1}\n", "r.yaml");
  torch::nn::AnyModule model = create_model(c.model, {3, 10});
  EXPECT_EQ(dropout_of(model), 0.5);
  const std::vector<double> rates = drop_path_rates_of(model);
  ASSERT_EQ(rates.size(), 23u);  // B1: 1.1 x (1, 2, 2, 3, 3, 4, 1) rounded up
  EXPECT_DOUBLE_EQ(rates[22], 0.1 * 22 / 23);
  EXPECT_CONTAINS(error_of([] { parse_config("model: {type: efficientnet_b0, drop_path: 0.1}\n", "r.yaml"); }),
                  "did you mean drop_path_rate?");
  EXPECT_CONTAINS(error_of([] { parse_config("model: {type: efficientnet_b0, dropout: 1.5}\n", "r.yaml"); }),
                  "model.dropout");
}

// The checked-in goldens (tests/golden/mobile_golden.h): train mode, then eval mode after the
// calibration; every logit within 1e-4 of the largest.
TEST(EfficientNet, MatchesCheckedInTorchvisionLogits) {
  int64_t checked = 0;
  for (const golden::MobileGolden& g : golden::mobile_goldens()) {
    if (g.type.rfind("efficientnet", 0) != 0) continue;
    expect_matches_mobile_golden(g);
    ++checked;
  }
  EXPECT_EQ(checked, 1);  // efficientnet_b0
}

// ---------------------------------------------------------------------------------------------
// Extra, live: against torchvision itself (tests/golden/mobile_golden.py make|check|count); skipped,
// saying why, without the venv's Python or torchvision.
class EfficientNetPython : public MobilePython {};

TEST_F(EfficientNetPython, LoadsTorchvisionWeightsAndMatchesItsLogits) {
  expect_loads_torchvision_weights("efficientnet_b0");
}

TEST_F(EfficientNetPython, TorchvisionLoadsStokerWeightsAndMatchesOurLogits) {
  expect_torchvision_loads_ours("efficientnet_b0");
}

TEST_F(EfficientNetPython, ParameterCountsEqualTorchvisionsBuiltInTheTest) {
  const std::map<std::string, int64_t> counts = this->counts(run("count"));
  for (const std::string& type : kTypes) {
    ASSERT_TRUE(counts.count(type)) << type;
    torch::nn::AnyModule model = build(type);
    EXPECT_EQ(parameter_count(*model.ptr()), counts.at(type)) << type;
  }
}

}  // namespace
}  // namespace stoker::models
