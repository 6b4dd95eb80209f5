// The dynamic loss scaler (growth, back-off, skipped steps, unscale before clipping, state) and the
// autocast guard of trainer/precision.h.
#include "optim/grad_scaler.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/autocast_mode.h>

#include <sstream>

#include "test_util.h"
#include "optim/optim.h"
#include "trainer/precision.h"

namespace stoker {
namespace {

struct Toy {
  torch::nn::Linear layer{torch::nn::LinearOptions(4, 2)};
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  explicit Toy(OptimizerImpl impl = OptimizerImpl::kFused) {
    torch::manual_seed(3);
    layer = torch::nn::Linear(torch::nn::LinearOptions(4, 2));
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(layer->parameters(), std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(0.1).momentum(0.9)));
    optimizer = std::make_unique<SGD>(groups, torch::optim::SGDOptions(0.1).momentum(0.9), impl);
  }
  torch::Tensor loss() {
    const torch::Tensor x = torch::linspace(-1, 1, 12).reshape({3, 4});
    return layer->forward(x).pow(2).mean();
  }
};

GradScalerOptions small() {
  return GradScalerOptions().with_init_scale(8).with_growth_factor(2).with_backoff_factor(0.5).with_growth_interval(2);
}

TEST(GradScaler, GrowsAfterGrowthIntervalCleanSteps) {
  Toy toy;
  GradScaler scaler(small(), torch::kCPU);
  const std::vector<double> expected = {8, 16, 16, 32, 32};  // after steps 1..5
  for (double want : expected) {
    toy.optimizer->zero_grad();
    scaler.scale(toy.loss()).backward();
    scaler.step(*toy.optimizer);
    scaler.update();
    EXPECT_EQ(scaler.scale_value(), want);
  }
  EXPECT_EQ(scaler.skipped_steps(), 0);
}

// An inf or NaN gradient: the step is skipped (weights untouched), the scale backs off, the
// clean-step count restarts, and the skip is counted.
TEST(GradScaler, BacksOffAndSkipsOnInfOrNan) {
  for (double bad : {INFINITY, NAN}) {
    for (OptimizerImpl impl : {OptimizerImpl::kFused, OptimizerImpl::kForeach, OptimizerImpl::kReference}) {
      Toy toy(impl);
      GradScaler scaler(small(), torch::kCPU);
      // One clean step: the clean-step counter is at 1 of 2.
      scaler.scale(toy.loss()).backward();
      scaler.step(*toy.optimizer);
      scaler.update();
      toy.optimizer->zero_grad();

      const torch::Tensor before = toy.layer->weight.detach().clone();
      scaler.scale(toy.loss()).backward();
      toy.layer->weight.mutable_grad()[0][1] = bad;  // inject
      scaler.step(*toy.optimizer);
      scaler.update();
      EXPECT_TRUE(torch::equal(before, toy.layer->weight.detach())) << "a bad step changed the weights";
      EXPECT_EQ(scaler.scale_value(), 4.0);
      EXPECT_EQ(scaler.skipped_steps(), 1);
      toy.optimizer->zero_grad();

      // Growth starts counting again: two more clean steps to grow back to 8.
      for (double want : {4.0, 8.0}) {
        scaler.scale(toy.loss()).backward();
        scaler.step(*toy.optimizer);
        scaler.update();
        toy.optimizer->zero_grad();
        EXPECT_EQ(scaler.scale_value(), want);
      }
      EXPECT_FALSE(torch::equal(before, toy.layer->weight.detach())) << "clean steps did not train";
    }
  }
}

// unscale() leaves the true gradients, so clipping sees them: clipped scaled-and-unscaled
// gradients equal clipped plain gradients.
TEST(GradScaler, UnscaleBeforeClippingGivesTheTrueGradients) {
  Toy plain, scaled;
  GradScaler scaler(GradScalerOptions().with_init_scale(1024), torch::kCPU);
  plain.loss().backward();
  scaler.scale(scaled.loss()).backward();
  EXPECT_TRUE(torch::allclose(scaled.layer->weight.grad(), 1024 * plain.layer->weight.grad()));
  scaler.unscale(*scaled.optimizer);
  EXPECT_TRUE(torch::allclose(scaled.layer->weight.grad(), plain.layer->weight.grad(), 1e-6, 1e-7));
  clip_grad_norm(plain.layer->parameters(), 0.01);
  clip_grad_norm(scaled.layer->parameters(), 0.01);
  EXPECT_TRUE(torch::allclose(scaled.layer->weight.grad(), plain.layer->weight.grad(), 1e-6, 1e-8));
  scaler.step(*scaled.optimizer);
  scaled.optimizer->zero_grad();
  scaler.update();
  // A second unscale in one step is a usage error with a message saying what to do.
  scaler.scale(scaled.loss()).backward();
  scaler.unscale(*scaled.optimizer);
  EXPECT_CONTAINS(testing::error_of([&] { scaler.unscale(*scaled.optimizer); }), "call update()");
}

TEST(GradScaler, DisabledIsTransparent) {
  Toy a, b;
  GradScaler scaler(GradScalerOptions().with_enabled(false), torch::kCPU);
  const torch::Tensor loss = a.loss();
  EXPECT_TRUE(scaler.scale(loss).equal(loss));
  scaler.scale(loss).backward();
  scaler.step(*a.optimizer);
  scaler.update();
  b.loss().backward();
  b.optimizer->step();
  EXPECT_TRUE(torch::equal(a.layer->weight, b.layer->weight));
  EXPECT_EQ(scaler.scale_value(), 1.0);
}

TEST(GradScaler, StateRoundTripsThroughAnArchive) {
  Toy toy;
  GradScaler scaler(small(), torch::kCPU);
  for (int i = 0; i < 3; ++i) {
    scaler.scale(toy.loss()).backward();
    if (i == 1) toy.layer->weight.mutable_grad()[0][0] = NAN;
    scaler.step(*toy.optimizer);
    scaler.update();
    toy.optimizer->zero_grad();
  }
  torch::serialize::OutputArchive out;
  scaler.save(out);
  std::ostringstream bytes;
  out.save_to(bytes);
  GradScaler restored(small(), torch::kCPU);  // options come from the config, state from the archive
  torch::serialize::InputArchive in;
  std::istringstream read(bytes.str());
  in.load_from(read);
  restored.load(in);
  EXPECT_EQ(restored.scale_value(), scaler.scale_value());
  EXPECT_EQ(restored.skipped_steps(), 1);
  // The clean-step counter came along too: one more clean step grows both the same way.
  for (GradScaler* s : {&scaler, &restored}) {
    scaler.scale(toy.loss()).backward();
    s->step(*toy.optimizer);
    s->update();
    toy.optimizer->zero_grad();
  }
  EXPECT_EQ(restored.scale_value(), scaler.scale_value());
}

TEST(GradScaler, RejectsBadOptions) {
  EXPECT_CONTAINS(testing::error_of([] { GradScaler(GradScalerOptions().with_backoff_factor(1.5), torch::kCPU); }),
                  "backoff_factor");
  EXPECT_CONTAINS(testing::error_of([] { GradScaler(GradScalerOptions().with_growth_factor(0.5), torch::kCPU); }),
                  "growth_factor");
}

// ---- autocast ---------------------------------------------------------------------------------------

TEST(Autocast, Bf16OnTheCpuCastsMatmulsAndConvolutionsAndRestoresAfter) {
  torch::nn::Linear linear(8, 8);
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(3, 8, 3));
  const torch::Tensor x = torch::randn({2, 8});
  const torch::Tensor image = torch::randn({1, 3, 8, 8});
  {
    AutocastGuard guard(torch::kCPU, Precision::kBf16Mixed);
    EXPECT_EQ(linear->forward(x).scalar_type(), torch::kBFloat16);
    EXPECT_EQ(conv->forward(image).scalar_type(), torch::kBFloat16);
    {
      AutocastGuard nested(torch::kCPU, Precision::kBf16Mixed);
      EXPECT_EQ(linear->forward(x).scalar_type(), torch::kBFloat16);
    }
    EXPECT_EQ(linear->forward(x).scalar_type(), torch::kBFloat16) << "the nested guard switched it off";
  }
  EXPECT_EQ(linear->forward(x).scalar_type(), torch::kFloat32);
  EXPECT_FALSE(at::autocast::is_autocast_enabled(torch::kCPU));
  // The weights themselves stay float32 (master weights).
  EXPECT_EQ(linear->weight.scalar_type(), torch::kFloat32);
  {
    AutocastGuard off(torch::kCPU, Precision::kFp32);
    EXPECT_EQ(linear->forward(x).scalar_type(), torch::kFloat32);
  }
}

TEST(Precision, NamesRoundTripAndUnknownNamesAreErrors) {
  for (const char* name : {"fp32", "tf32", "bf16-mixed", "fp16-mixed", "bf16-true"}) {
    EXPECT_EQ(precision_name(parse_precision(name)), name);
  }
  EXPECT_CONTAINS(testing::error_of([] { parse_precision("fp8"); }), "bf16-mixed");
  EXPECT_TRUE(needs_loss_scaling(Precision::kFp16Mixed));
  EXPECT_FALSE(needs_loss_scaling(Precision::kBf16Mixed));
  EXPECT_EQ(parameter_dtype(Precision::kBf16True), torch::kBFloat16);
}

}  // namespace
}  // namespace stoker
