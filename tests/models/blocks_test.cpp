// Tests of models/blocks.cpp: one BasicBlock type serves the compact, CIFAR and torchvision
// ResNets; shortcuts appear only where the shape changes, under the name the network asks for; the
// compact ResNet keeps its parameter names and count.
#include "models/blocks.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <regex>
#include <string>
#include <typeinfo>
#include <vector>

#include "models/cifar_resnet.h"
#include "models/compact_resnet.h"
#include "models/registry.h"
#include "models/resnet.h"

namespace stoker::models {
namespace {
namespace nn = torch::nn;

std::map<std::string, std::vector<int64_t>> shapes(nn::Module& model) {
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& p : model.named_parameters()) out[p.key()] = p.value().sizes().vec();
  return out;
}

// The modules of `model` whose names match `block_name`, checked to be BasicBlocks.
std::vector<const nn::Module*> blocks_named(nn::Module& model, const std::string& block_name) {
  std::vector<const nn::Module*> out;
  for (const auto& m : model.named_modules()) {
    if (!std::regex_match(m.key(), std::regex(block_name))) continue;
    EXPECT_NE(m.value()->as<BasicBlock>(), nullptr) << m.key() << " is a " << m.value()->name();
    out.push_back(m.value().get());
  }
  return out;
}

TEST(BasicBlock, CompactCifarAndTorchvisionResNetsShareOneBlockType) {
  CompactResNet compact{CompactResNetOptions{}, ModelShape{}};  // widths 16/32/64, one block each
  ResNet r18 = resnet18(10);
  CifarResNet r20 = cifar_resnet20();
  const auto compact_blocks = blocks_named(*compact, R"(features\.stage\d_block\d)");
  const auto r18_blocks = blocks_named(*r18, R"(layer\d\.\d)");
  const auto r20_blocks = blocks_named(*r20, R"(layer\d\.\d)");
  ASSERT_EQ(compact_blocks.size(), 3u);
  ASSERT_EQ(r18_blocks.size(), 8u);
  ASSERT_EQ(r20_blocks.size(), 9u);
  EXPECT_EQ(typeid(*compact_blocks[0]), typeid(*r18_blocks[0]));
  EXPECT_EQ(typeid(*r20_blocks[0]), typeid(*r18_blocks[0]));
  EXPECT_EQ(typeid(*r18_blocks[0]), typeid(BasicBlockImpl));
}

TEST(BasicBlock, ProjectsTheShortcutOnlyWhereTheShapeChanges) {
  BasicBlock same(16, 16, 1);
  EXPECT_EQ(shapes(*same).size(), 6u);  // conv1, bn1 (2), conv2, bn2 (2): no shortcut
  BasicBlock wider(16, 32, 1);
  EXPECT_EQ(shapes(*wider).at("downsample.0.weight"), (std::vector<int64_t>{32, 16, 1, 1}));
  BasicBlock strided(16, 16, 2, "shortcut");
  const auto s = shapes(*strided);
  EXPECT_EQ(s.at("shortcut.0.weight"), (std::vector<int64_t>{16, 16, 1, 1}));
  EXPECT_EQ(s.at("shortcut.1.weight"), (std::vector<int64_t>{16}));
  EXPECT_FALSE(s.count("downsample.0.weight"));

  torch::NoGradGuard no_grad;
  EXPECT_EQ(strided->forward(torch::randn({2, 16, 8, 8})).sizes(),
            (std::vector<int64_t>{2, 16, 4, 4}));
  EXPECT_EQ(wider->forward(torch::randn({2, 16, 8, 8})).sizes(),
            (std::vector<int64_t>{2, 32, 8, 8}));
}

TEST(Bottleneck, ExpandsFourTimesAndProjectsWhereTheShapeChanges) {
  Bottleneck first(64, 64, 1);  // 64 -> 256 channels: a projection even at stride 1
  EXPECT_EQ(shapes(*first).at("downsample.0.weight"), (std::vector<int64_t>{256, 64, 1, 1}));
  Bottleneck inner(256, 64, 1);
  EXPECT_FALSE(shapes(*inner).count("downsample.0.weight"));
  torch::NoGradGuard no_grad;
  EXPECT_EQ(first->forward(torch::randn({1, 64, 8, 8})).sizes(),
            (std::vector<int64_t>{1, 256, 8, 8}));
}

// Counted by hand for the default options (1 input channel, widths 16/32/64, one block each,
// 10 classes): stem 144 + 32; stage 1 2 * (16*16*9 + 32) = 4,672; stage 2 16*32*9 + 32*32*9 + 128
// + projection 16*32 + 64 = 14,528; stage 3 32*64*9 + 64*64*9 + 256 + 32*64 + 128 = 57,728;
// classifier 64*10 + 10 = 650.
TEST(CompactResNet, KeepsItsParameterNamesAndCount) {
  nn::AnyModule model = create_model(model_options("compact_resnet"), ModelShape{});
  const auto s = shapes(*model.ptr());
  int64_t count = 0;
  for (const auto& p : model.ptr()->parameters()) count += p.numel();
  EXPECT_EQ(count, 77'754);
  EXPECT_EQ(s.at("features.stem_conv.weight"), (std::vector<int64_t>{16, 1, 3, 3}));
  EXPECT_EQ(s.at("features.stage1_block0.conv1.weight"), (std::vector<int64_t>{16, 16, 3, 3}));
  EXPECT_EQ(s.at("features.stage2_block0.shortcut.0.weight"), (std::vector<int64_t>{32, 16, 1, 1}));
  EXPECT_EQ(s.at("features.stage3_block0.shortcut.1.bias"), (std::vector<int64_t>{64}));
  EXPECT_EQ(s.at("classifier.weight"), (std::vector<int64_t>{10, 64}));
  EXPECT_FALSE(s.count("features.stage1_block0.shortcut.0.weight"));  // identity in stage 1
  for (const auto& [key, shape] : s) EXPECT_EQ(key.find("downsample"), std::string::npos) << key;
}

}  // namespace
}  // namespace stoker::models
