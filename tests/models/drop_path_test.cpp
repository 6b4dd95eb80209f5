// Stochastic depth (models/blocks.h drop_path, model.drop_path_rate): whole samples' residual
// branches dropped at the configured rate in training, nothing at evaluation, rates rising linearly
// over the blocks, and the same parameters and state dict as without it.
#include "models/blocks.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/error.h"
#include "models/compact_resnet.h"
#include "models/registry.h"
#include "models/resnet.h"
#include "recipe/config.h"

namespace stoker::models {
namespace {

TEST(DropPath, DropsWholeSamplesWithTheDrawnMaskAndScalesTheRest) {
  const torch::Tensor x = torch::rand({4000, 3, 2, 2}) + 1.0;  // no zeros of its own
  torch::manual_seed(11);
  const torch::Tensor out = drop_path(x, 0.3, /*training=*/true);
  // The mask is one Bernoulli(0.7) draw per sample from the default generator: the same draw again.
  torch::manual_seed(11);
  const torch::Tensor keep = torch::empty({4000, 1, 1, 1}).bernoulli_(0.7).view({4000});
  const torch::Tensor dropped = (out.flatten(1) == 0).all(1);
  EXPECT_TRUE(torch::equal(dropped, keep == 0)) << "a sample's whole branch is dropped or kept";
  const int64_t n_dropped = dropped.sum().item<int64_t>();
  EXPECT_EQ(n_dropped, (keep == 0).sum().item<int64_t>());
  // 4000 x 0.3 = 1200, standard deviation 29: the fixed seed's count lies well inside 5 of them.
  EXPECT_NEAR(static_cast<double>(n_dropped), 1200.0, 145.0);
  const torch::Tensor kept = keep.nonzero().view({-1});
  EXPECT_TRUE(torch::allclose(out.index_select(0, kept), x.index_select(0, kept) / 0.7));
  EXPECT_TRUE(torch::equal(drop_path(x, 0.3, /*training=*/false), x));
  EXPECT_TRUE(torch::equal(drop_path(x, 0.0, /*training=*/true), x));
}

TEST(DropPath, RatesRiseLinearlyOverTheBlocks) {
  const std::vector<double> five = drop_path_rates(0.1, 5);
  const std::vector<double> want = {0.0, 0.025, 0.05, 0.075, 0.1};
  ASSERT_EQ(five.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(five[i], want[i], 1e-15) << i;
  EXPECT_EQ(drop_path_rates(0.2, 1), (std::vector<double>{0.2}));
  ResNet net = resnet18(10, 3);
  EXPECT_EQ(apply_drop_path(*net, 0.14), 8);  // ResNet-18's 8 basic blocks
  std::vector<double> rates;
  for (const auto& m : net->modules(false)) {
    if (auto* b = m->as<BasicBlockImpl>()) rates.push_back(b->drop_path_rate());
  }
  ASSERT_EQ(rates.size(), 8u);
  for (size_t i = 0; i < 8; ++i) EXPECT_NEAR(rates[i], 0.02 * static_cast<double>(i), 1e-12) << i;
}

// A residual block with identity shortcut on inputs far from zero, so that the final ReLU passes
// everything: a dropped sample's output is its input, a kept one's input + branch / keep.
TEST(DropPath, ABlockDropsItsBranchPerSampleInTrainingOnly) {
  torch::manual_seed(3);
  BasicBlock block(4, 4, 1);
  const torch::Tensor x = torch::randn({64, 4, 5, 5}) + 100.0;
  const torch::Tensor plain = block->forward(x);  // rate 0: the branch is plain - x
  block->set_drop_path(0.5);
  torch::manual_seed(5);
  const torch::Tensor out = block->forward(x);
  torch::manual_seed(5);
  const torch::Tensor keep = torch::empty({64, 1, 1, 1}).bernoulli_(0.5).view({64});
  for (int64_t i = 0; i < 64; ++i) {
    const torch::Tensor want = keep[i].item<float>() > 0 ? x[i] + (plain[i] - x[i]) / 0.5 : x[i];
    EXPECT_TRUE(torch::allclose(out[i], want, 1e-4, 1e-4)) << i;
  }
  block->eval();
  const torch::Tensor eval_out = block->forward(x);
  block->set_drop_path(0.0);
  EXPECT_TRUE(torch::equal(eval_out, block->forward(x))) << "evaluation ignores the rate";
}

TEST(DropPath, ModelKeyKeepsEvaluationAndTheStateDict) {
  for (const std::string type : {"compact_resnet", "cifar_resnet20", "resnet18"}) {
    const Config plain = parse_config("model: {type: " + type + "}\n", "r.yaml");
    const Config dropped = parse_config("model: {type: " + type + ", drop_path_rate: 0.2}\n", "r.yaml");
    torch::manual_seed(1);
    torch::nn::AnyModule a = create_model(plain.model, {3, 10});
    torch::manual_seed(1);
    torch::nn::AnyModule b = create_model(dropped.model, {3, 10});
    const auto pa = a.ptr()->named_parameters(), pb = b.ptr()->named_parameters();
    ASSERT_EQ(pa.keys(), pb.keys()) << type;
    ASSERT_EQ(a.ptr()->named_buffers().keys(), b.ptr()->named_buffers().keys()) << type;
    for (const auto& kv : pa) EXPECT_TRUE(torch::equal(kv.value(), pb[kv.key()])) << type << " " << kv.key();
    a.ptr()->eval();
    b.ptr()->eval();
    const torch::Tensor x = torch::randn({4, 3, 32, 32});
    EXPECT_TRUE(torch::equal(a.forward(x), b.forward(x))) << type;
    b.ptr()->train();
    a.ptr()->train();
    torch::manual_seed(9);
    const torch::Tensor ya = a.forward(x);
    torch::manual_seed(9);
    EXPECT_FALSE(torch::equal(ya, b.forward(x))) << type << ": training with drop_path_rate drops branches";
  }
  EXPECT_THROW(parse_config("model: {type: resnet50, drop_path_rate: 1.0}\n", "r.yaml"), Error);
}

}  // namespace
}  // namespace stoker::models
