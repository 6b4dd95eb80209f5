// The torchvision-compatible ResNets: shapes, names and initialisation as torchvision's, logits
// against torchvision's checked in (tests/golden/resnet_golden.h), and, with the libtorch venv's
// Python and torchvision, live comparisons both ways (the ResNetPython tests).
#include "models/resnet.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "golden/resnet_golden.h"
#include "models/registry.h"
#include "models/torchvision_golden.h"
#include "models/weights/state_dict.h"
#include "test_util.h"

namespace stoker::models {
namespace {
namespace fs = std::filesystem;
using namespace testing;  // NOLINT: the shared golden helpers (models/torchvision_golden.h)

torch::nn::AnyModule build(const std::string& type, int64_t num_classes = 1000, int64_t in_channels = 3) {
  return create_model(model_options(type), {in_channels, num_classes});
}

TEST(ResNet, ParameterCountsEqualTorchvisions) {
  const std::vector<std::pair<std::string, int64_t>> expected{{"resnet18", 11'689'512},
                                                              {"resnet34", 21'797'672},
                                                              {"resnet50", 25'557'032},
                                                              {"resnet101", 44'549'160}};
  for (const auto& [type, count] : expected) {
    torch::nn::AnyModule model = build(type);
    EXPECT_EQ(parameter_count(*model.ptr()), count) << type;
  }
}

TEST(ResNet, OutputShapeFromRegistry) {
  torch::NoGradGuard no_grad;
  const torch::Tensor x = torch::randn({2, 3, 64, 64});
  for (const std::string type : {"resnet18", "resnet34", "resnet50", "resnet101"}) {
    torch::nn::AnyModule model = build(type, 7);
    model.ptr()->eval();
    EXPECT_EQ(model.forward(x).sizes(), (std::vector<int64_t>{2, 7})) << type;
  }
  // in_channels reaches the stem: a grayscale ResNet-18.
  torch::nn::AnyModule gray = build("resnet18", 10, 1);
  EXPECT_EQ(state_map(*gray.ptr()).at("conv1.weight").sizes(), (std::vector<int64_t>{64, 1, 7, 7}));
  EXPECT_EQ(gray.forward(torch::randn({2, 1, 32, 32})).sizes(), (std::vector<int64_t>{2, 10}));
}

TEST(ResNet, NamesAndShapesEqualTorchvisionsStateDictKeys) {
  ResNet r18 = resnet18(10);
  auto s18 = state_map(*r18);
  EXPECT_EQ(s18.size(), 122u);  // len(torchvision.models.resnet18().state_dict())
  const std::map<std::string, std::vector<int64_t>> sample{
      {"conv1.weight", {64, 3, 7, 7}},
      {"bn1.weight", {64}},
      {"bn1.running_var", {64}},
      {"bn1.num_batches_tracked", {}},
      {"layer1.0.conv1.weight", {64, 64, 3, 3}},
      {"layer1.1.bn2.bias", {64}},
      {"layer2.0.conv1.weight", {128, 64, 3, 3}},
      {"layer2.0.downsample.0.weight", {128, 64, 1, 1}},
      {"layer2.0.downsample.1.weight", {128}},
      {"layer2.0.downsample.1.num_batches_tracked", {}},
      {"layer2.1.bn2.running_mean", {128}},
      {"layer4.1.conv2.weight", {512, 512, 3, 3}},
      {"fc.weight", {10, 512}},
      {"fc.bias", {10}}};
  for (const auto& [key, shape] : sample) {
    ASSERT_TRUE(s18.count(key)) << key;
    EXPECT_EQ(s18.at(key).sizes(), shape) << key;
  }
  EXPECT_EQ(s18.at("bn1.num_batches_tracked").scalar_type(), torch::kLong);
  EXPECT_FALSE(s18.count("layer1.0.downsample.0.weight"));  // identity shortcut in layer1
  EXPECT_FALSE(s18.count("layer2.1.downsample.0.weight"));

  ResNet r50 = resnet50();
  auto s50 = state_map(*r50);
  EXPECT_EQ(s50.size(), 320u);  // len(torchvision.models.resnet50().state_dict())
  // layer1 of a Bottleneck ResNet projects 64 -> 256 channels.
  EXPECT_EQ(s50.at("layer1.0.downsample.0.weight").sizes(), (std::vector<int64_t>{256, 64, 1, 1}));
  EXPECT_EQ(s50.at("layer1.0.downsample.1.weight").sizes(), (std::vector<int64_t>{256}));
  EXPECT_EQ(s50.at("layer2.0.conv1.weight").sizes(), (std::vector<int64_t>{128, 256, 1, 1}));
  EXPECT_EQ(s50.at("layer2.0.conv2.weight").sizes(), (std::vector<int64_t>{128, 128, 3, 3}));
  EXPECT_EQ(s50.at("layer4.2.conv3.weight").sizes(), (std::vector<int64_t>{2048, 512, 1, 1}));
  EXPECT_EQ(s50.at("fc.weight").sizes(), (std::vector<int64_t>{1000, 2048}));
  // Bottleneck v1.5: the stride sits on the 3x3 conv (conv2), not on conv1.
  auto modules = r50->named_modules();
  auto stride_of = [&](const std::string& name) {
    auto* conv = modules[name]->as<torch::nn::Conv2d>();
    return conv ? std::vector<int64_t>(conv->options.stride()->begin(),
                                       conv->options.stride()->end())
                : std::vector<int64_t>{};
  };
  EXPECT_EQ(stride_of("layer2.0.conv1"), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(stride_of("layer2.0.conv2"), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(stride_of("layer2.0.downsample.0"), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(stride_of("layer1.0.conv2"), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(stride_of("conv1"), (std::vector<int64_t>{2, 2}));

  ResNet r101 = resnet101();
  auto s101 = state_map(*r101);
  EXPECT_TRUE(s101.count("layer3.22.bn3.running_var"));
  EXPECT_FALSE(s101.count("layer3.23.conv1.weight"));
}

TEST(ResNet, InitialisedAsTorchvision) {
  ResNet model = resnet18();
  auto s = state_map(*model);
  // Kaiming normal, fan_out, ReLU gain: std = sqrt(2 / (out_channels * kh * kw)).
  EXPECT_NEAR(s.at("conv1.weight").std().item<double>(), std::sqrt(2.0 / (64 * 49)), 0.002);
  EXPECT_NEAR(s.at("layer4.1.conv2.weight").std().item<double>(), std::sqrt(2.0 / (512 * 9)),
              0.001);
  EXPECT_NEAR(s.at("conv1.weight").mean().item<double>(), 0.0, 0.002);
  EXPECT_TRUE(s.at("layer3.0.bn1.weight").eq(1).all().item<bool>());
  EXPECT_TRUE(s.at("layer3.0.bn1.bias").eq(0).all().item<bool>());
  EXPECT_TRUE(s.at("layer3.0.downsample.1.weight").eq(1).all().item<bool>());
  // fc keeps nn.Linear's default: uniform within 1/sqrt(fan_in).
  EXPECT_LE(s.at("fc.weight").abs().max().item<double>(), 1.0 / std::sqrt(512.0) + 1e-6);
}

// ---------------------------------------------------------------------------------------------
// Against torchvision, checked in (tests/golden/resnet_golden.h, written by
// tests/golden/resnet_golden.py): every floating-point state-dict entry and the input come from an
// integer formula that both sides compute from the entry's name, so no weights are stored.

// Every logit within 1e-4 of the model's largest |logit| (float32 rounding alone differs from a
// float64 forward pass by about 1e-6 of it).
TEST(ResNet, MatchesCheckedInTorchvisionLogits) {
  ASSERT_EQ(golden::resnet_goldens().size(), 2u);  // resnet18 and resnet50
  for (const golden::ResNetGolden& g : golden::resnet_goldens()) {
    SCOPED_TRACE(g.type);
    torch::nn::AnyModule model = build(g.type, g.num_classes, g.input_shape[1]);
    // The same set of entries as torchvision's state dict (their names are checked above and by
    // the logits: each entry's values depend on its name).
    EXPECT_EQ(golden_fill(*model.ptr()), g.filled_tensors);
    model.ptr()->eval();
    torch::NoGradGuard no_grad;
    const torch::Tensor ours = model.forward(golden_input(g.input_shape)).to(torch::kFloat64);
    const torch::Tensor expected =
        torch::tensor(g.logits, torch::kFloat64).reshape({g.input_shape[0], g.num_classes});
    ASSERT_EQ(ours.sizes(), expected.sizes());
    const double scale = expected.abs().max().item<double>();
    const double max_diff = (ours - expected).abs().max().item<double>();
    ::testing::Test::RecordProperty(g.type + "_max_abs_logit_difference", fmt::format("{:.3g}", max_diff));
    EXPECT_LE(max_diff, 1e-4 * scale) << "ours:\n" << ours << "\ntorchvision:\n" << expected;
    // The comparison means something only if the logits differ between classes and samples.
    EXPECT_GT(expected.std().item<double>(), 0.1 * scale);
    EXPECT_GT((expected[0] - expected[1]).abs().max().item<double>(), 0.1 * scale);
  }
}

// ---------------------------------------------------------------------------------------------
// Extra, live: against torchvision itself, through the libtorch venv's Python
// (tests/golden/resnet_golden.py make|check); skipped, saying why, without Python or torchvision.

class ResNetPython : public TorchvisionPython {
 protected:
  ResNetPython() : TorchvisionPython("resnet_golden.py") {}
};

TEST_F(ResNetPython, LoadsTorchvisionWeightsAndMatchesItsLogits) {
  ASSERT_NO_FATAL_FAILURE(run("make {dir}"));
  ResNet model = resnet18(10);
  weights::load_state_dict(*model, tmp_ / "torchvision_resnet18.pt");
  // The BN statistics came across too (the script ran 3 training-mode passes).
  EXPECT_EQ(state_map(*model).at("layer2.1.bn2.num_batches_tracked").item<int64_t>(), 3);
  model->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor x = read_tensor(tmp_ / "input.pt");
  ASSERT_EQ(x.sizes(), (std::vector<int64_t>{2, 3, 64, 64}));
  expect_close(model->forward(x), read_tensor(tmp_ / "torchvision_logits.pt"));
}

TEST_F(ResNetPython, TorchvisionLoadsStokerWeightsAndMatchesOurLogits) {
  ASSERT_NO_FATAL_FAILURE(run("make {dir}"));  // for input.pt
  ResNet model = resnet18(10);
  {
    torch::NoGradGuard no_grad;  // non-trivial BN statistics, as on the Python side
    model->train();
    model->forward(torch::randn({4, 3, 64, 64}));
  }
  weights::save_state_dict(*model, tmp_ / "stoker_resnet18.pt");
  ASSERT_NO_FATAL_FAILURE(run("check {dir}"));  // plain torch.load (weights_only=True), without a warning
  model->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor ours = model->forward(read_tensor(tmp_ / "input.pt"));
  expect_close(read_tensor(tmp_ / "python_logits.pt"), ours);
}

}  // namespace
}  // namespace stoker::models
