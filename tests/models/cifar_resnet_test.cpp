// Tests of models/cifar_resnet.cpp: parameter counts (option B shortcuts), where the stride-2
// stages and projections are, output shapes for CIFAR- and MNIST-shaped input, depth checks.
#include "models/cifar_resnet.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "models/blocks.h"
#include "models/registry.h"
#include "test_util.h"

namespace stoker::models {
namespace {
namespace nn = torch::nn;
using testing::error_of;

int64_t parameter_count(nn::Module& model, const std::string& containing = "") {
  int64_t n = 0;
  for (const auto& p : model.named_parameters()) {
    if (p.key().find(containing) != std::string::npos) n += p.value().numel();
  }
  return n;
}

torch::nn::AnyModule from_registry(const std::string& type, int64_t in_channels,
                                   int64_t num_classes) {
  return create_model(model_options(type), {in_channels, num_classes});
}

// Counted by hand for 3 input channels and 10 classes (conv weights, BN weight + bias, fc):
//   stem 3*16*9 + 32 = 464;  fc 64*10 + 10 = 650
//   stage 1: n blocks of 2 * (16*16*9 + 32) = 4,672
//   stage 2: first block 16*32*9 + 32*32*9 + 128 + projection (16*32 + 64) = 14,528,
//            then n-1 blocks of 2 * (32*32*9 + 64) = 18,560
//   stage 3: first block 32*64*9 + 64*64*9 + 256 + projection (32*64 + 128) = 57,728,
//            then n-1 blocks of 2 * (64*64*9 + 128) = 73,984
// The projections hold 576 + 2,176 = 2,752; without them (option A) the counts are the paper's
// 0.27M (269,722) and 0.85M (853,018).
TEST(CifarResNet, ParameterCountsWithProjectionShortcuts) {
  struct Case {
    std::string type;
    int64_t expected;
  };
  for (const Case& c : {Case{"cifar_resnet20", 272'474}, Case{"cifar_resnet56", 855'770}}) {
    nn::AnyModule model = from_registry(c.type, 3, 10);
    EXPECT_EQ(parameter_count(*model.ptr()), c.expected) << c.type;
    EXPECT_EQ(parameter_count(*model.ptr(), "downsample"), 2'752) << c.type;
  }
  // One input channel: the stem loses 2 * 16 * 9 weights; 100 classes: fc gains 90 * 65.
  EXPECT_EQ(parameter_count(*from_registry("cifar_resnet20", 1, 10).ptr()), 272'474 - 288);
  EXPECT_EQ(parameter_count(*from_registry("cifar_resnet20", 3, 100).ptr()), 272'474 + 90 * 65);
}

TEST(CifarResNet, ProjectionsOnlyWhereTheShapeChanges) {
  CifarResNet model = cifar_resnet56();
  std::vector<std::string> projections;
  for (const auto& m : model->named_modules()) {
    if (m.key().size() > 11 && m.key().substr(m.key().size() - 11) == ".downsample") {
      projections.push_back(m.key());
    }
  }
  EXPECT_EQ(projections, (std::vector<std::string>{"layer2.0.downsample", "layer3.0.downsample"}));
  // n = 9 blocks per stage; 3 * 9 * 2 + 1 = 55 3x3 convolutions plus fc make the depth of 56.
  int64_t convs3x3 = 0, blocks = 0;
  for (const auto& m : model->modules()) {
    if (auto* conv = m->as<nn::Conv2d>(); conv && conv->weight.size(2) == 3) ++convs3x3;
    if (m->as<BasicBlock>()) ++blocks;
  }
  EXPECT_EQ(convs3x3, 55);
  EXPECT_EQ(blocks, 27);
}

TEST(CifarResNet, StagesHalveTheResolutionTwice) {
  torch::NoGradGuard no_grad;
  CifarResNet model = cifar_resnet20();
  model->eval();
  auto children = model->named_children();
  torch::Tensor x = torch::randn({2, 3, 32, 32});
  x = children["conv1"]->as<nn::Conv2d>()->forward(x);
  EXPECT_EQ(x.sizes(), (std::vector<int64_t>{2, 16, 32, 32}));
  const std::vector<std::vector<int64_t>> expected{{2, 16, 32, 32}, {2, 32, 16, 16}, {2, 64, 8, 8}};
  for (int stage = 0; stage < 3; ++stage) {
    x = children["layer" + std::to_string(stage + 1)]->as<nn::Sequential>()->forward(x);
    EXPECT_EQ(x.sizes(), expected[stage]) << "layer" << stage + 1;
  }
}

TEST(CifarResNet, OutputShapesForCifarAndMnistInput) {
  torch::NoGradGuard no_grad;
  for (const std::string type : {"cifar_resnet20", "cifar_resnet56"}) {
    nn::AnyModule rgb = from_registry(type, 3, 10);
    rgb.ptr()->eval();
    torch::Tensor logits = rgb.forward(torch::randn({4, 3, 32, 32}));
    EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{4, 10})) << type;
    EXPECT_TRUE(torch::isfinite(logits).all().item<bool>()) << type;

    nn::AnyModule gray = from_registry(type, 1, 7);
    gray.ptr()->eval();
    logits = gray.forward(torch::randn({3, 1, 28, 28}));
    EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{3, 7})) << type;
    EXPECT_TRUE(torch::isfinite(logits).all().item<bool>()) << type;
  }
}

TEST(CifarResNet, TrainsOnOneBatch) {
  // A few SGD steps on one fixed batch must lower its loss: gradients reach every parameter.
  torch::manual_seed(0);
  CifarResNet model = cifar_resnet20(10, 3);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  const torch::Tensor x = torch::randn({16, 3, 16, 16});
  const torch::Tensor y = torch::arange(16) % 10;
  double first = 0, last = 0;
  for (int step = 0; step < 8; ++step) {
    sgd.zero_grad();
    torch::Tensor loss = torch::cross_entropy_loss(model->forward(x), y);
    loss.backward();
    if (step == 0) {
      for (const auto& p : model->named_parameters()) {
        ASSERT_TRUE(p.value().grad().defined()) << p.key();
      }
    }
    sgd.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_LT(last, first * 0.8);
}

TEST(CifarResNet, RejectsDepthsNotOfTheForm6nPlus2) {
  EXPECT_CONTAINS(error_of([] { CifarResNet(21); }), "depth 6n + 2 (20, 32, 44, 56, 110, ...), got 21");
  EXPECT_CONTAINS(error_of([] { CifarResNet(2); }), "got 2");
  EXPECT_CONTAINS(error_of([] { CifarResNet(20, 0, 3); }), "positive num_classes");
}

}  // namespace
}  // namespace stoker::models
