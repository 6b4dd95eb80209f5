// The EMA of the weights: its update against a hand computation, timm's warm-up decay, swapping it
// into a model, and its round trip through a checkpoint.
#include "optim/ema.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "test_util.h"
#include "trainer/checkpoint.h"

namespace stoker {
namespace {
using stoker::testing::TempDir;

// A linear layer and a BatchNorm: float parameters, float buffers and an integer buffer.
struct TinyImpl : torch::nn::Module {
  TinyImpl() {
    fc = register_module("fc", torch::nn::Linear(2, 2));
    bn = register_module("bn", torch::nn::BatchNorm1d(2));
  }
  torch::Tensor forward(const torch::Tensor& x) { return bn(fc(x)); }
  torch::nn::Linear fc{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};
TORCH_MODULE(Tiny);

// Sets every float tensor of the model to `base` + its position, and the batch count to `count`.
void set_weights(Tiny& m, double base, int64_t count) {
  torch::NoGradGuard no_grad;
  for (auto* t : {&m->fc->weight, &m->fc->bias, &m->bn->weight, &m->bn->bias, &m->bn->running_mean,
                  &m->bn->running_var}) {
    t->copy_(torch::arange(t->numel(), torch::kFloat32).view(t->sizes()) + base);
  }
  m->bn->num_batches_tracked.fill_(count);
}

std::map<std::string, torch::Tensor> by_name(const ModelEma& ema) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& [name, t] : ema.named_tensors()) out[name] = t;
  return out;
}

TEST(ModelEma, UpdatesMatchAHandComputation) {
  Tiny model;
  ModelEma ema(0.75);
  EXPECT_TRUE(ema.empty());
  set_weights(model, 1.0, 3);
  ema.update(*model);  // the first update copies
  set_weights(model, 5.0, 4);
  ema.update(*model);
  set_weights(model, -3.0, 9);
  ema.update(*model);
  EXPECT_EQ(ema.updates(), 3);

  const auto e = by_name(ema);
  ASSERT_EQ(e.size(), 7u);  // fc.weight, fc.bias, bn.weight, bn.bias, running_mean, running_var, count
  // e = 0.75 * (0.75 * w1 + 0.25 * w2) + 0.25 * w3, with w_k = base_k + position.
  const torch::Tensor w = torch::arange(4, torch::kFloat32).view({2, 2});
  const torch::Tensor expected = 0.75 * (0.75 * (w + 1) + 0.25 * (w + 5)) + 0.25 * (w - 3);
  EXPECT_TRUE(torch::allclose(e.at("fc.weight"), expected, 0, 1e-6)) << e.at("fc.weight");
  EXPECT_TRUE(torch::allclose(e.at("bn.running_var"), expected.view({-1}).slice(0, 0, 2), 0, 1e-6));
  EXPECT_EQ(e.at("bn.num_batches_tracked").item<int64_t>(), 9) << "integer buffers are copied";
  // The average is its own copy: the model keeps its weights.
  EXPECT_TRUE(torch::equal(model->fc->weight, w - 3));
}

TEST(ModelEma, WarmupFollowsTimm) {
  ModelEma plain(0.999), warm(0.999, true);
  EXPECT_EQ(plain.decay_at(1), 0.0);
  EXPECT_EQ(plain.decay_at(2), 0.999);
  EXPECT_EQ(warm.decay_at(1), 0.0);
  EXPECT_NEAR(warm.decay_at(2), 1 - std::pow(2.0, -2.0 / 3.0), 1e-15);
  EXPECT_NEAR(warm.decay_at(8), 0.75, 1e-15);
  EXPECT_EQ(warm.decay_at(10'000'000), 0.999);

  Tiny model;
  set_weights(model, 0.0, 1);
  warm.update(*model);
  set_weights(model, 3.0, 2);
  warm.update(*model);
  const double d = warm.decay_at(2);
  EXPECT_NEAR(by_name(warm).at("fc.bias")[1].item<double>(), d * 1.0 + (1 - d) * 4.0, 1e-6);
}

TEST(ModelEma, SwapsIntoTheModelAndBack) {
  Tiny model;
  ModelEma ema(0.5);
  set_weights(model, 0.0, 1);
  {
    EmaWeightsInModel none(ema, *model);  // no average yet: the model is left as it is
    EXPECT_EQ(model->fc->bias[0].item<float>(), 0.0f);
  }
  ema.update(*model);
  set_weights(model, 2.0, 2);
  ema.update(*model);  // average: 1.0 + position
  {
    EmaWeightsInModel swap(ema, *model);
    EXPECT_EQ(model->fc->bias[1].item<float>(), 2.0f);
    EXPECT_EQ(model->bn->running_mean[0].item<float>(), 1.0f);
  }
  EXPECT_EQ(model->fc->bias[1].item<float>(), 3.0f);
  EXPECT_EQ(model->bn->running_mean[0].item<float>(), 2.0f);
}

TEST(ModelEma, RoundTripsThroughACheckpoint) {
  TempDir dir;
  Tiny model;
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  ModelEma ema(0.9);
  for (int i = 0; i < 3; ++i) {
    set_weights(model, i, i);
    ema.update(*model);
  }
  CheckpointContent content;
  content.ema = ema.named_tensors();
  content.ema_updates = ema.updates();
  save_checkpoint(dir / "c.pt", *model, optimizer, content);

  Tiny other;
  const CheckpointContent loaded = load_checkpoint(dir / "c.pt", *other, nullptr, torch::kCPU);
  EXPECT_EQ(loaded.ema_updates, 3);
  ModelEma restored(0.9);
  restored.load(loaded.ema, loaded.ema_updates, *other, "c.pt");
  EXPECT_EQ(restored.updates(), 3);
  const auto a = by_name(ema), b = by_name(restored);
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) EXPECT_TRUE(torch::equal(t, b.at(name))) << name;
  // The next update continues from the restored average, as the original's does.
  set_weights(model, 7.0, 7);
  set_weights(other, 7.0, 7);
  ema.update(*model);
  restored.update(*other);
  EXPECT_TRUE(torch::equal(by_name(ema).at("fc.weight"), by_name(restored).at("fc.weight")));

  // A checkpoint without an EMA loads with none; one for another model is refused by name.
  save_checkpoint(dir / "plain.pt", *model, optimizer, CheckpointContent{});
  EXPECT_TRUE(load_checkpoint(dir / "plain.pt", *other, nullptr, torch::kCPU).ema.empty());
  auto wrong = loaded.ema;
  wrong[0].second = torch::zeros({3, 3});
  const std::string msg = stoker::testing::error_of([&] { ModelEma(0.9).load(wrong, 3, *other, "c.pt"); });
  EXPECT_CONTAINS(msg, "c.pt: the EMA's '" + wrong[0].first + "' has shape 3x3 but the model expects");
}

}  // namespace
}  // namespace stoker
