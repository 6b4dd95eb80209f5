// The blocks EfficientNet and MobileNetV3 share (models/mobile_blocks.h): torchvision's width
// rounding, names and shapes, squeeze-excitation's arithmetic, where the input is added back,
// stochastic depth per sample and torchvision's rule for its rates.
#include "models/mobile_blocks.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "models/torchvision_golden.h"
#include "test_util.h"
#include "models/efficientnet.h"

namespace stoker::models {
namespace {
using testing::state_map;

TEST(MobileBlocks, MakeDivisibleEqualsTorchvisions) {
  // torchvision.models._utils._make_divisible(v, 8) for each v.
  const std::vector<std::pair<double, int64_t>> cases = {
      {3.0, 8},   {4.0, 8},    {5.0, 8},     {8.0, 8},      {11.9, 16},   {12.0, 16}, {17.6, 16},
      {27.9, 32}, {28.0, 32},  {35.2, 32},   {36.0, 40},    {38.4, 40},   {100.0, 104}, {134.4, 136}};
  for (const auto& [v, want] : cases) EXPECT_EQ(make_divisible(v, 8), want) << v;
  EXPECT_EQ(make_divisible(19.2, 8), 24) << "rounding down to 16 would lose more than 10%";
  EXPECT_EQ(make_divisible(2.0, 8, 4), 4) << "min_value";
}

TEST(MobileBlocks, ConvNormActivationHasTorchvisionsNamesAndPadding) {
  ConvNormActivation depthwise(24, 24, ConvNormSettings{5, 2, 24, 1, Activation::kHardswish, {0.001, 0.01}});
  const auto s = state_map(*depthwise);
  EXPECT_EQ(s.size(), 6u);  // 0.weight, 1.{weight, bias, running_mean, running_var, num_batches_tracked}
  EXPECT_EQ(s.at("0.weight").sizes(), (std::vector<int64_t>{24, 1, 5, 5}));
  EXPECT_FALSE(s.count("0.bias")) << "no bias before a batch norm";
  EXPECT_EQ(s.at("1.running_var").sizes(), (std::vector<int64_t>{24}));
  auto* bn = depthwise->named_children()["1"]->as<torch::nn::BatchNorm2d>();
  ASSERT_NE(bn, nullptr);
  EXPECT_EQ(bn->options.eps(), 0.001);
  EXPECT_EQ(bn->options.momentum(), 0.01);
  // Padding (k - 1) / 2 keeps ceil(size / stride): 9x10 -> 5x5.
  EXPECT_EQ(depthwise->forward(torch::randn({2, 24, 9, 10})).sizes(), (std::vector<int64_t>{2, 24, 5, 5}));

  // Conv, batch norm (evaluation: running statistics 0 and 1), then the activation.
  ConvNormActivation plain(3, 4, ConvNormSettings{1, 1, 1, 1, Activation::kSiLU, {}});
  plain->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor x = torch::randn({2, 3, 4, 4});
  const torch::Tensor conv = torch::conv2d(x, state_map(*plain).at("0.weight"));
  EXPECT_TRUE(torch::allclose(plain->forward(x), torch::silu(conv / std::sqrt(1 + 1e-5)), 1e-5, 1e-6));
}

TEST(MobileBlocks, SqueezeExcitationScalesChannelsByItsGate) {
  torch::manual_seed(2);
  SqueezeExcitation se(8, 2, Activation::kReLU, Activation::kHardsigmoid);
  const auto s = state_map(*se);
  EXPECT_EQ(s.size(), 4u);
  EXPECT_EQ(s.at("fc1.weight").sizes(), (std::vector<int64_t>{2, 8, 1, 1}));
  EXPECT_EQ(s.at("fc1.bias").sizes(), (std::vector<int64_t>{2}));
  EXPECT_EQ(s.at("fc2.weight").sizes(), (std::vector<int64_t>{8, 2, 1, 1}));
  torch::NoGradGuard no_grad;
  const torch::Tensor x = torch::randn({3, 8, 5, 6});
  const torch::Tensor pooled = x.mean({2, 3});  // [3, 8]
  const torch::Tensor hidden = torch::relu(torch::linear(pooled, s.at("fc1.weight").flatten(1), s.at("fc1.bias")));
  const torch::Tensor gate = torch::hardsigmoid(torch::linear(hidden, s.at("fc2.weight").flatten(1), s.at("fc2.bias")));
  EXPECT_TRUE(torch::allclose(se->forward(x), x * gate.view({3, 8, 1, 1}), 1e-5, 1e-6));
}

InvertedResidualSettings settings(int64_t in, int64_t expanded, int64_t out, int64_t stride, int64_t squeeze) {
  InvertedResidualSettings s;
  s.in = in;
  s.expanded = expanded;
  s.out = out;
  s.kernel = 3;
  s.stride = stride;
  s.squeeze = squeeze;
  return s;
}

TEST(MobileBlocks, InvertedResidualLayoutAndWhereTheInputIsAddedBack) {
  // Expansion, SE: block.0 expand, block.1 depthwise, block.2 SE, block.3 project.
  InvertedResidual full(settings(16, 64, 16, 1, 8));
  EXPECT_TRUE(full->residual());
  const auto s = state_map(*full);
  EXPECT_EQ(s.at("block.0.0.weight").sizes(), (std::vector<int64_t>{64, 16, 1, 1}));
  EXPECT_EQ(s.at("block.1.0.weight").sizes(), (std::vector<int64_t>{64, 1, 3, 3}));
  EXPECT_EQ(s.at("block.2.fc1.weight").sizes(), (std::vector<int64_t>{8, 64, 1, 1}));
  EXPECT_EQ(s.at("block.3.0.weight").sizes(), (std::vector<int64_t>{16, 64, 1, 1}));
  // No expansion where the widths agree, no SE where squeeze is 0: depthwise and project only.
  InvertedResidual lean(settings(16, 16, 24, 2, 0));
  EXPECT_FALSE(lean->residual());
  const auto l = state_map(*lean);
  EXPECT_EQ(l.at("block.0.0.weight").sizes(), (std::vector<int64_t>{16, 1, 3, 3}));
  EXPECT_EQ(l.at("block.1.0.weight").sizes(), (std::vector<int64_t>{24, 16, 1, 1}));
  EXPECT_FALSE(l.count("block.2.0.weight"));
  EXPECT_EQ(lean->forward(torch::randn({2, 16, 7, 7})).sizes(), (std::vector<int64_t>{2, 24, 4, 4}));
  EXPECT_FALSE(InvertedResidual(settings(16, 64, 24, 1, 0))->residual()) << "other width out";
  EXPECT_FALSE(InvertedResidual(settings(16, 64, 16, 2, 0))->residual()) << "stride 2";
  EXPECT_THROW(InvertedResidual(settings(16, 64, 16, 3, 0)), Error);

  // The residual one: output = input + the block's branch.
  full->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor x = torch::randn({2, 16, 6, 6});
  auto* block = full->named_children()["block"]->as<torch::nn::Sequential>();
  EXPECT_TRUE(torch::allclose(full->forward(x), x + block->forward(x), 1e-6, 1e-6));
}

// A dropped sample's output is its input, a kept one's input + branch / keep; evaluation ignores
// the rate. Same per-sample Bernoulli draw as drop_path (models/blocks.h).
TEST(MobileBlocks, StochasticDepthDropsWholeSamplesBranchesInTrainingOnly) {
  torch::manual_seed(3);
  InvertedResidual block(settings(8, 16, 8, 1, 4));
  const torch::Tensor x = torch::randn({64, 8, 5, 5});
  torch::manual_seed(4);
  const torch::Tensor branch = block->forward(x) - x;  // rate 0; batch-norm in training mode
  block->set_drop_path(0.5);
  torch::manual_seed(4);
  const torch::Tensor out = block->forward(x);
  torch::manual_seed(4);
  const torch::Tensor keep = torch::empty({64, 1, 1, 1}).bernoulli_(0.5).view({64});
  ASSERT_GT(keep.sum().item<double>(), 10);
  ASSERT_LT(keep.sum().item<double>(), 54);
  for (int64_t i = 0; i < 64; ++i) {
    const torch::Tensor want = keep[i].item<float>() > 0 ? x[i] + branch[i] / 0.5 : x[i];
    EXPECT_TRUE(torch::allclose(out[i], want, 1e-4, 1e-5)) << i;
  }
  block->eval();
  const torch::Tensor eval_out = block->forward(x);
  block->set_drop_path(0.0);
  EXPECT_TRUE(torch::equal(eval_out, block->forward(x))) << "evaluation ignores the rate";
}

// torchvision's EfficientNet: sd_prob = stochastic_depth_prob * block_id / total_blocks.
TEST(MobileBlocks, StochasticDepthRatesFollowTorchvision) {
  const std::vector<double> rates = stochastic_depth_rates(0.2, 16);
  ASSERT_EQ(rates.size(), 16u);
  for (size_t i = 0; i < 16; ++i) EXPECT_DOUBLE_EQ(rates[i], 0.2 * static_cast<double>(i) / 16.0) << i;
  EfficientNet net = efficientnet("efficientnet_b0", 10);
  EXPECT_EQ(apply_stochastic_depth(*net, 0.32), 16);  // B0's 16 MBConv blocks, residual or not
  std::vector<double> set;
  for (const auto& m : net->modules(false)) {
    if (auto* b = m->as<InvertedResidualImpl>()) set.push_back(b->drop_path_rate());
  }
  ASSERT_EQ(set.size(), 16u);
  for (size_t i = 0; i < 16; ++i) EXPECT_NEAR(set[i], 0.02 * static_cast<double>(i), 1e-12) << i;
}

}  // namespace
}  // namespace stoker::models
