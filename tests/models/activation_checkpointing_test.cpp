// Activation checkpointing (models/activation_checkpointing.h): the gradients, the random masks, the
// running statistics and the generators' state after a step equal the plain model's; the selection of
// blocks; model.activation_checkpointing on a model without blocks is an error naming the key.
#include "models/activation_checkpointing.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include "models/blocks.h"
#include "models/cifar_resnet.h"
#include "models/compact_resnet.h"
#include "models/registry.h"
#include "models/resnet.h"
#include "recipe/config.h"
#include "recipe/parts.h"
#include "test_util.h"
#include "trainer/precision.h"

namespace stoker {
namespace {

// A compact ResNet with dropout and drop path (random masks in the blocks and after them).
torch::nn::AnyModule random_net(const models::BlockSelection& checkpoint) {
  torch::manual_seed(4);
  TypedOptions o = models::compact_resnet({8, 16}, {2, 2}, 0.2);
  o.as<models::CompactResNetOptions>().drop_path_rate = 0.3;
  torch::nn::AnyModule m = models::create_model(o, {3, 5});
  models::apply_activation_checkpointing(*m.ptr(), checkpoint, "compact_resnet");
  return m;
}

struct Step {
  std::vector<torch::Tensor> grads, buffers;
  torch::Tensor input_grad, rng_after, loss;
};

Step step(torch::nn::AnyModule model, const torch::Tensor& x, bool autocast = false) {
  torch::manual_seed(11);  // the dropout and drop path masks
  torch::Tensor input = x.clone().requires_grad_(true);
  torch::Tensor loss;
  {
    std::optional<AutocastGuard> guard;
    if (autocast) guard.emplace(torch::kCPU, Precision::kBf16Mixed);
    loss = model.forward(input).to(torch::kFloat32).square().mean();
  }
  loss.backward();
  Step s;
  for (const auto& p : model.ptr()->parameters()) s.grads.push_back(p.grad().clone());
  for (const auto& b : model.ptr()->buffers()) s.buffers.push_back(b.clone());
  s.input_grad = input.grad().clone();
  s.rng_after = at::detail::getDefaultCPUGenerator().get_state();
  s.loss = loss.detach();
  return s;
}

void expect_same(const Step& a, const Step& b, double tolerance) {
  EXPECT_TRUE(torch::allclose(a.loss, b.loss, 0, tolerance));
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) {
    EXPECT_TRUE(torch::allclose(a.grads[i], b.grads[i], tolerance, tolerance)) << "parameter " << i;
  }
  EXPECT_TRUE(torch::allclose(a.input_grad, b.input_grad, tolerance, tolerance));
  for (size_t i = 0; i < a.buffers.size(); ++i) EXPECT_TRUE(torch::equal(a.buffers[i], b.buffers[i])) << "buffer " << i;
  EXPECT_TRUE(torch::equal(a.rng_after, b.rng_after)) << "the recomputation left the generator elsewhere";
}

// Every block recomputed: the same gradients (float32, 1e-6) with the same dropout and drop path
// masks, running statistics updated once, and the generator where the plain step leaves it.
TEST(ActivationCheckpointing, GradientsMasksAndStatisticsEqualThePlainModels) {
  torch::manual_seed(0);
  const torch::Tensor x = torch::randn({6, 3, 8, 8});
  const Step plain = step(random_net({}), x);
  models::BlockSelection all;
  all.all = true;
  expect_same(plain, step(random_net(all), x), 1e-6);
  models::BlockSelection some;
  some.indices = {0, 3};
  expect_same(plain, step(random_net(some), x), 1e-6);
}

// The families with other blocks (ViT encoder blocks, ConvNeXt blocks, EfficientNet's and
// MobileNetV3's inverted residuals) recompute them to the same gradients and statistics.
TEST(ActivationCheckpointing, EveryFamilysBlocksRecomputeToTheSameGradients) {
  for (const char* type : {"mobilenet_v3_small", "vit", "convnext", "efficientnet_b0"}) {
    SCOPED_TRACE(type);
    const auto build = [&](bool checkpoint) {
      torch::manual_seed(4);
      torch::nn::AnyModule m = models::create_model(models::model_options(type), {3, 5, 32, 32});
      models::BlockSelection all;
      all.all = checkpoint;
      EXPECT_GT(models::apply_activation_checkpointing(*m.ptr(), all, type), checkpoint ? 0 : -1);
      return m;
    };
    torch::manual_seed(0);
    const torch::Tensor x = torch::randn({4, 3, 32, 32});
    expect_same(step(build(false), x), step(build(true), x), 1e-5);
  }
}

// Under autocast (bf16 on the CPU) the recomputation runs in the forward's dtypes.
TEST(ActivationCheckpointing, TheRecomputationKeepsTheForwardsAutocast) {
  torch::manual_seed(0);
  const torch::Tensor x = torch::randn({4, 3, 8, 8});
  models::BlockSelection all;
  all.all = true;
  expect_same(step(random_net({}), x, true), step(random_net(all), x, true), 1e-6);
}

// The first block's input needs no gradient; its parameters still get theirs: those of the same
// block without checkpointing (compared with them, not with zero, which a sum can round to).
TEST(ActivationCheckpointing, AFirstBlockWithoutInputGradientsStillTrainsItsParameters) {
  torch::manual_seed(2);
  const torch::Tensor x = torch::randn({2, 3, 5, 5});
  std::vector<std::vector<torch::Tensor>> grads;
  for (const bool checkpointing : {false, true}) {
    torch::manual_seed(3);
    models::BasicBlock block(3, 4, 1);
    block->set_checkpointing(checkpointing);
    block->forward(x).square().sum().backward();
    grads.emplace_back();
    for (const auto& p : block->parameters()) {
      ASSERT_TRUE(p.grad().defined()) << "checkpointing " << checkpointing;
      grads.back().push_back(p.grad().clone());
    }
  }
  for (size_t i = 0; i < grads[0].size(); ++i) {
    const double scale = grads[0][i].abs().max().item<double>();
    EXPECT_GT(scale, 0.0) << "parameter " << i << " got no gradient at all";
    EXPECT_TRUE(torch::allclose(grads[1][i], grads[0][i], 1e-5, 1e-6 * scale)) << "parameter " << i;
  }
}

TEST(ActivationCheckpointing, BlocksAreFoundInModuleOrderAndSelectedByIndex) {
  auto resnet = models::resnet50(10, 3);
  const auto blocks = models::checkpointable_blocks(*resnet);
  EXPECT_EQ(blocks.size(), 16u);  // 3 + 4 + 6 + 3 bottlenecks
  models::BlockSelection some;
  some.indices = {1, 15};
  EXPECT_EQ(models::apply_activation_checkpointing(*resnet, some, "resnet50"), 2);
  EXPECT_TRUE(blocks[1]->checkpointing() && blocks[15]->checkpointing());
  EXPECT_FALSE(blocks[0]->checkpointing());
  some.indices = {16};
  EXPECT_CONTAINS(testing::error_of([&] { models::apply_activation_checkpointing(*resnet, some, "resnet50"); }),
                  "activation_checkpointing: block 16 does not exist: model.type resnet50 has 16 blocks (indices 0 to 15)");
  EXPECT_EQ(models::checkpointable_blocks(*models::cifar_resnet20(10, 3)).size(), 9u);
}

// Through the config: a model without blocks is an error naming model.activation_checkpointing.
TEST(ActivationCheckpointing, AModelWithoutBlocksIsAnErrorNamingTheKey) {
  const Config mlp = parse_config("model: {type: mlp, hidden: [8], activation_checkpointing: true}\n", "r.yaml");
  EXPECT_CONTAINS(testing::error_of([&] { make_model(mlp, {1}); }),
                  "model.activation_checkpointing: model.type mlp has no blocks to checkpoint");
  const Config listed = parse_config("model: {type: compact_resnet, activation_checkpointing: [0, 2]}\n", "r.yaml");
  EXPECT_EQ(listed.activation_checkpointing.indices, (std::vector<int64_t>{0, 2}));
  EXPECT_CONTAINS(config_to_yaml(listed), "activation_checkpointing: [0, 2]");
  EXPECT_EQ(models::checkpointable_blocks(*make_model(listed, {1}).ptr()).size(), 3u);
  EXPECT_CONTAINS(testing::error_of([] { parse_config("model: {activation_checkpointing: some}\n", "r.yaml"); }),
                  "model.activation_checkpointing at line 1: expected true, false or a list of block indices");
  EXPECT_CONTAINS(testing::error_of([] { parse_config("model: {activation_checkpointing: [-1]}\n", "r.yaml"); }),
                  "model.activation_checkpointing[0]");
}

}  // namespace
}  // namespace stoker

namespace stoker {
namespace {

// On a GPU: the CUDA generator's state is put back for the recomputation (dropout and drop path draw
// their masks there) and restored after it.
TEST(ActivationCheckpointingCuda, TheCudaGeneratorsMasksAndStateAreKept) {
  STOKER_NEEDS_CUDA();
  const torch::Device gpu(torch::kCUDA, 0);
  torch::manual_seed(0);
  const torch::Tensor x = torch::randn({6, 3, 8, 8}).to(gpu);
  auto on_gpu = [&](const models::BlockSelection& s) {
    torch::nn::AnyModule m = random_net(s);
    m.ptr()->to(gpu);
    torch::manual_seed(11);
    torch::Tensor input = x.clone().requires_grad_(true);
    m.forward(input).square().mean().backward();
    std::vector<torch::Tensor> out;
    for (const auto& p : m.ptr()->parameters()) out.push_back(p.grad().cpu());
    out.push_back(input.grad().cpu());
    out.push_back(at::globalContext().defaultGenerator(gpu).get_state());
    return out;
  };
  models::BlockSelection all;
  all.all = true;
  const auto plain = on_gpu({}), recomputed = on_gpu(all);
  ASSERT_EQ(plain.size(), recomputed.size());
  for (size_t i = 0; i + 1 < plain.size(); ++i) EXPECT_TRUE(torch::allclose(plain[i], recomputed[i], 1e-6, 1e-6)) << i;
  EXPECT_TRUE(torch::equal(plain.back(), recomputed.back())) << "the CUDA generator was left elsewhere";
}

}  // namespace
}  // namespace stoker
