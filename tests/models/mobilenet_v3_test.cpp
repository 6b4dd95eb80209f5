// torchvision-compatible MobileNetV3-Small and -Large: parameter counts, names, shapes, batch-norm
// settings, initialisation and keys as torchvision's; logits against torchvision's checked in
// (tests/golden/mobile_golden.h); with the libtorch venv's Python and torchvision, live comparisons
// both ways and parameter counts from torchvision itself (MobileNetV3Python).
#include "models/mobilenet_v3.h"

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

const std::vector<std::string> kTypes = {"mobilenet_v3_small", "mobilenet_v3_large"};

torch::nn::AnyModule build(const std::string& type, int64_t num_classes = 1000, int64_t in_channels = 3) {
  return create_model(model_options(type), {in_channels, num_classes});
}

void expect_shapes(const std::map<std::string, torch::Tensor>& s,
                   const std::map<std::string, std::vector<int64_t>>& expected) {
  for (const auto& [key, shape] : expected) {
    ASSERT_TRUE(s.count(key)) << key;
    EXPECT_EQ(s.at(key).sizes(), shape) << key;
  }
}

TEST(MobileNetV3, ParameterCountsEqualTorchvisions) {
  EXPECT_EQ(parameter_count(*build("mobilenet_v3_small").ptr()), 2'542'856);
  EXPECT_EQ(parameter_count(*build("mobilenet_v3_large").ptr()), 5'483'032);
}

TEST(MobileNetV3, NamesAndShapesEqualTorchvisionsStateDictKeys) {
  const auto small = state_map(*build("mobilenet_v3_small").ptr());
  EXPECT_EQ(small.size(), 244u);  // len(torchvision.models.mobilenet_v3_small().state_dict())
  expect_shapes(small, {{"features.0.0.weight", {16, 3, 3, 3}},
                        {"features.0.1.num_batches_tracked", {}},
                        // Block 1: no expansion, SE (16 -> make_divisible(16 / 4) = 8 -> 16).
                        {"features.1.block.0.0.weight", {16, 1, 3, 3}},
                        {"features.1.block.1.fc1.weight", {8, 16, 1, 1}},
                        {"features.1.block.1.fc2.bias", {16}},
                        {"features.1.block.2.0.weight", {16, 16, 1, 1}},
                        // Block 4: expand, depthwise 5x5, SE, project.
                        {"features.4.block.0.0.weight", {96, 24, 1, 1}},
                        {"features.4.block.1.0.weight", {96, 1, 5, 5}},
                        {"features.4.block.2.fc1.weight", {24, 96, 1, 1}},
                        {"features.4.block.3.0.weight", {40, 96, 1, 1}},
                        {"features.4.block.3.1.running_var", {40}},
                        {"features.12.0.weight", {576, 96, 1, 1}},
                        {"classifier.0.weight", {1024, 576}},
                        {"classifier.3.weight", {1000, 1024}},
                        {"classifier.3.bias", {1000}}});
  EXPECT_FALSE(small.count("features.2.block.2.fc1.weight")) << "block 2 has no SE";
  EXPECT_FALSE(small.count("features.13.0.weight"));

  const auto large = state_map(*build("mobilenet_v3_large").ptr());
  EXPECT_EQ(large.size(), 312u);
  expect_shapes(large, {{"features.1.block.0.0.weight", {16, 1, 3, 3}},
                        {"features.1.block.1.0.weight", {16, 16, 1, 1}},  // no SE: project is block.1
                        {"features.4.block.2.fc1.weight", {24, 72, 1, 1}},
                        {"features.12.block.2.fc1.weight", {168, 672, 1, 1}},
                        {"features.12.block.3.0.weight", {112, 672, 1, 1}},
                        {"features.16.0.weight", {960, 160, 1, 1}},
                        {"classifier.0.weight", {1280, 960}},
                        {"classifier.3.weight", {1000, 1280}}});
}

TEST(MobileNetV3, OutputShapeGrayInputAndBatchNormAsTorchvisions) {
  torch::NoGradGuard no_grad;
  for (const std::string& type : kTypes) {
    torch::nn::AnyModule model = build(type, 7);
    model.ptr()->eval();
    EXPECT_EQ(model.forward(torch::randn({2, 3, 12, 12})).sizes(), (std::vector<int64_t>{2, 7})) << type;
    int64_t norms = 0;
    for (const auto& m : model.ptr()->modules(false)) {
      if (auto* bn = m->as<torch::nn::BatchNorm2d>()) {
        EXPECT_EQ(bn->options.eps(), 0.001);  // torchvision's partial(nn.BatchNorm2d, eps=0.001, momentum=0.01)
        EXPECT_EQ(bn->options.momentum(), 0.01);
        ++norms;
      }
    }
    EXPECT_EQ(norms, type == "mobilenet_v3_small" ? 34 : 46) << type;
  }
  torch::nn::AnyModule gray = build("mobilenet_v3_small", 10, 1);
  EXPECT_EQ(state_map(*gray.ptr()).at("features.0.0.weight").sizes(), (std::vector<int64_t>{16, 1, 3, 3}));
  EXPECT_EQ(gray.forward(torch::randn({2, 1, 32, 32})).sizes(), (std::vector<int64_t>{2, 10}));
}

TEST(MobileNetV3, InitialisedAsTorchvision) {
  torch::manual_seed(0);
  const auto s = state_map(*build("mobilenet_v3_large").ptr());
  EXPECT_NEAR(s.at("features.16.0.weight").std().item<double>(), std::sqrt(2.0 / 960), 0.001);
  EXPECT_TRUE(s.at("features.4.block.2.fc2.bias").eq(0).all().item<bool>());
  EXPECT_TRUE(s.at("features.7.block.1.1.weight").eq(1).all().item<bool>());
  // Linear: normal(0, 0.01), zero bias.
  EXPECT_NEAR(s.at("classifier.0.weight").std().item<double>(), 0.01, 0.0002);
  EXPECT_NEAR(s.at("classifier.3.weight").mean().item<double>(), 0.0, 0.0002);
  EXPECT_TRUE(s.at("classifier.3.bias").eq(0).all().item<bool>());
}

// dropout (torchvision's 0.2) reaches classifier.2; drop_path_rate (0 by default, as torchvision,
// which has none) reaches the residual blocks with the EfficientNet rule.
TEST(MobileNetV3, KeysReachTheNetwork) {
  auto dropout_of = [](torch::nn::AnyModule& model) {
    auto* dropout = model.ptr()->named_modules()["classifier.2"]->as<torch::nn::Dropout>();
    EXPECT_NE(dropout, nullptr);
    return dropout ? dropout->options.p() : -1.0;
  };
  auto rates_of = [](torch::nn::AnyModule& model) {
    std::vector<double> rates;
    for (const auto& m : model.ptr()->modules(false)) {
      if (auto* b = m->as<InvertedResidualImpl>()) rates.push_back(b->drop_path_rate());
    }
    return rates;
  };
  torch::nn::AnyModule plain =
      create_model(parse_config("model: {type: mobilenet_v3_large}\n", "r.yaml").model, {3, 10});
  EXPECT_EQ(dropout_of(plain), 0.2);
  for (double r : rates_of(plain)) EXPECT_EQ(r, 0.0);
  torch::nn::AnyModule set = create_model(
      parse_config("model: {type: mobilenet_v3_small, dropout: 0.1, drop_path_rate: 0.11}\n", "r.yaml").model, {3, 10});
  EXPECT_EQ(dropout_of(set), 0.1);
  const std::vector<double> rates = rates_of(set);
  ASSERT_EQ(rates.size(), 11u);
  EXPECT_DOUBLE_EQ(rates[10], 0.1);
  EXPECT_CONTAINS(error_of([] { parse_config("model: {type: mobilenet_v3_small, width: 2}\n", "r.yaml"); }),
                  "drop_path_rate, dropout");
}

TEST(MobileNetV3, MatchesCheckedInTorchvisionLogits) {
  int64_t checked = 0;
  for (const golden::MobileGolden& g : golden::mobile_goldens()) {
    if (g.type.rfind("mobilenet_v3", 0) != 0) continue;
    expect_matches_mobile_golden(g);
    ++checked;
  }
  EXPECT_EQ(checked, 2);  // small and large
}

// ---------------------------------------------------------------------------------------------
// Extra, live: against torchvision itself (tests/golden/mobile_golden.py make|check|count).
class MobileNetV3Python : public MobilePython {};

TEST_F(MobileNetV3Python, LoadsTorchvisionWeightsAndMatchesItsLogits) {
  for (const std::string& type : kTypes) {
    SCOPED_TRACE(type);
    expect_loads_torchvision_weights(type);
  }
}

TEST_F(MobileNetV3Python, TorchvisionLoadsStokerWeightsAndMatchesOurLogits) {
  for (const std::string& type : kTypes) {
    SCOPED_TRACE(type);
    expect_torchvision_loads_ours(type);
  }
}

TEST_F(MobileNetV3Python, ParameterCountsEqualTorchvisionsBuiltInTheTest) {
  const std::map<std::string, int64_t> counts = this->counts(run("count"));
  for (const std::string& type : kTypes) {
    ASSERT_TRUE(counts.count(type)) << type;
    EXPECT_EQ(parameter_count(*build(type).ptr()), counts.at(type)) << type;
  }
}

}  // namespace
}  // namespace stoker::models
