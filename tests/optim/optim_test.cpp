// Stoker's optimizers (fused, foreach, reference) against PyTorch's own SGD and AdamW (checked-in
// golden values, tests/golden/optim_golden.h, written by tests/golden/optim_golden.py), and
// gradient clipping.
#include "optim/optim.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <utility>

#include "golden/optim_golden.h"
#include "models/compact_resnet.h"
#include "models/registry.h"
#include "test_util.h"

namespace stoker {
namespace {

// Must match gradient() in tests/golden/optim_golden.py.
torch::Tensor gradient(const torch::Tensor& p, int t) {
  const torch::Tensor i = torch::arange(p.numel(), torch::kFloat32).reshape(p.sizes());
  return 0.5 * torch::sin(0.7 * i + 1.3 * t) + 0.1 * p.detach();
}

// Must match make_params() in tests/golden/optim_golden.py.
std::vector<torch::Tensor> make_params(torch::Device device = torch::kCPU) {
  torch::Tensor p0 = ((torch::arange(12, torch::kFloat32).reshape({3, 4}) - 5.5) * 0.1).to(device).requires_grad_();
  torch::Tensor p1 = torch::linspace(-0.3, 0.3, 4, torch::kFloat32).to(device).requires_grad_();
  return {p0, p1};
}

struct Case {
  std::string name;
  std::string type;  // sgd | adamw
  double momentum = 0;
  bool nesterov = false;
  double weight_decay = 0;
};

// Must match CASES and WEIGHT_DECAY in tests/golden/optim_golden.py.
const std::vector<Case>& cases() {
  static const std::vector<Case> all = {{"sgd_momentum", "sgd", 0.9, false, 5e-4},
                                        {"sgd_nesterov", "sgd", 0.9, true, 5e-4},
                                        {"sgd_plain", "sgd", 0.0, false, 5e-4},
                                        {"adamw", "adamw", 0, false, 0.05}};
  return all;
}

std::unique_ptr<torch::optim::Optimizer> build(const Case& c, const std::vector<torch::Tensor>& p,
                                               OptimizerImpl impl) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (c.type == "sgd") {
    auto o = [&](double wd) { return torch::optim::SGDOptions(0.1).momentum(c.momentum).nesterov(c.nesterov).weight_decay(wd); };
    groups.emplace_back(std::vector<torch::Tensor>{p[0]}, std::make_unique<torch::optim::SGDOptions>(o(c.weight_decay)));
    groups.emplace_back(std::vector<torch::Tensor>{p[1]}, std::make_unique<torch::optim::SGDOptions>(o(0.0)));
    return std::make_unique<SGD>(groups, o(c.weight_decay), impl);
  }
  auto o = [&](double wd) { return torch::optim::AdamWOptions(0.01).betas({0.9, 0.99}).eps(1e-8).weight_decay(wd); };
  groups.emplace_back(std::vector<torch::Tensor>{p[0]}, std::make_unique<torch::optim::AdamWOptions>(o(c.weight_decay)));
  groups.emplace_back(std::vector<torch::Tensor>{p[1]}, std::make_unique<torch::optim::AdamWOptions>(o(0.0)));
  return std::make_unique<AdamW>(groups, o(c.weight_decay), impl);
}

// Five steps with the learning rate lowered by 10% of the base each step, as the Python script does.
// On `device`; `loss_scale` > 0: the gradients come multiplied by it (fp16-mixed), and the step at
// `inf_step` (if any) has an inf gradient, which the optimizer must skip.
std::vector<float> run(const Case& c, OptimizerImpl impl, torch::Device device = torch::kCPU, double loss_scale = 0,
                       int inf_step = -1) {
  std::vector<torch::Tensor> p = make_params(device);
  auto opt = build(c, p, impl);
  const double base = c.type == "sgd" ? 0.1 : 0.01;
  auto* amp = dynamic_cast<AmpStepOptimizer*>(opt.get());
  for (int t = 0, taken = 0; t < 5 + (inf_step >= 0); ++t) {
    set_learning_rate(*opt, base * (1.0 - 0.1 * taken));
    for (auto& x : p) x.mutable_grad() = gradient(x.cpu(), taken).to(device);
    if (loss_scale <= 0) {
      opt->step();
      ++taken;
      continue;
    }
    const torch::Tensor scale = torch::full({}, loss_scale, torch::TensorOptions().device(device));
    for (auto& x : p) x.mutable_grad().mul_(loss_scale);
    if (t == inf_step) p[1].mutable_grad()[0] = std::numeric_limits<float>::infinity();
    const torch::Tensor found_inf = torch::full({1}, t == inf_step ? 1.0f : 0.0f, torch::TensorOptions().device(device));
    amp->step_amp(scale, found_inf);
    taken += t != inf_step;
  }
  std::vector<float> out;
  for (const auto& x : p) {
    const torch::Tensor flat = x.detach().cpu().flatten().contiguous();
    out.insert(out.end(), flat.data_ptr<float>(), flat.data_ptr<float>() + flat.numel());
  }
  return out;
}

const char* impl_name(OptimizerImpl impl) {
  return impl == OptimizerImpl::kFused ? "fused" : impl == OptimizerImpl::kForeach ? "foreach" : "reference";
}

// On a GPU, the fused kernels (with their learning rate as a device tensor) reproduce PyTorch's
// goldens too; and under fp16-mixed, gradients multiplied by the loss scale and one step with an inf
// gradient (found_inf set: skipped, as the loss scaler asks) end at the same values.
TEST(OptimizersCuda, FusedKernelsOnTheGpuMatchTheGoldensWithLossScalingAndASkippedStep) {
  STOKER_NEEDS_CUDA();
  const torch::Device gpu(torch::kCUDA, 0);
  for (const Case& c : cases()) {
    const auto golden = std::find_if(golden::optimizer_goldens().begin(), golden::optimizer_goldens().end(),
                                     [&](const auto& g) { return g.name == c.name; });
    ASSERT_NE(golden, golden::optimizer_goldens().end());
    const std::vector<double>& want = golden->values;
    for (const auto& [scale, inf_step] : {std::pair<double, int>{0, -1}, {1024, 2}}) {
      const std::vector<float> got = run(c, OptimizerImpl::kFused, gpu, scale, inf_step);
      ASSERT_EQ(got.size(), want.size()) << c.name;
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_NEAR(got[i], want[i], 1e-5 * std::max(1.0, std::abs(want[i])))
            << c.name << " on cuda:0, loss scale " << scale << ", value " << i;
      }
    }
  }
}

// All three implementations agree with each other to float32 rounding (1e-6).
TEST(Optimizers, FusedForeachAndReferenceAgree) {
  for (const Case& c : cases()) {
    const std::vector<float> ref = run(c, OptimizerImpl::kReference);
    for (OptimizerImpl impl : {OptimizerImpl::kFused, OptimizerImpl::kForeach}) {
      const std::vector<float> got = run(c, impl);
      ASSERT_EQ(got.size(), ref.size());
      for (size_t i = 0; i < ref.size(); ++i) {
        EXPECT_NEAR(got[i], ref[i], 1e-6) << c.name << " " << impl_name(impl) << " value " << i;
      }
    }
  }
}

// Golden values from PyTorch itself, checked in (relative 1e-5: the kernels order float32
// operations differently).
TEST(Optimizers, MatchPyTorchGoldenValues) {
  const auto& goldens = golden::optimizer_goldens();
  ASSERT_EQ(goldens.size(), cases().size());
  for (const Case& c : cases()) {
    const auto golden = std::find_if(goldens.begin(), goldens.end(), [&](const auto& g) { return g.name == c.name; });
    ASSERT_NE(golden, goldens.end()) << "no golden values for " << c.name << " in tests/golden/optim_golden.h";
    const std::vector<double>& want = golden->values;
    for (OptimizerImpl impl : {OptimizerImpl::kFused, OptimizerImpl::kForeach, OptimizerImpl::kReference}) {
      const std::vector<float> got = run(c, impl);
      ASSERT_EQ(got.size(), want.size()) << c.name;
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_NEAR(got[i], want[i], 1e-5 * std::max(1.0, std::abs(want[i])))
            << c.name << " " << impl_name(impl) << " value " << i;
      }
    }
  }
}

// A skipped step (found_inf = 1) leaves parameters and optimizer state untouched, and the step
// after it matches a run that never saw the bad step.
TEST(Optimizers, FoundInfSkipsTheStepInEveryImplementation) {
  for (const Case& c : cases()) {
    for (OptimizerImpl impl : {OptimizerImpl::kFused, OptimizerImpl::kForeach, OptimizerImpl::kReference}) {
      std::vector<torch::Tensor> p = make_params(), q = make_params();
      auto a = build(c, p, impl), b = build(c, q, impl);
      auto* amp = dynamic_cast<AmpStepOptimizer*>(a.get());
      ASSERT_NE(amp, nullptr);
      const torch::Tensor inf = torch::ones({1}), clean = torch::zeros({1});
      for (int t = 0; t < 3; ++t) {
        for (auto& x : p) x.mutable_grad() = gradient(x, t);
        for (auto& x : q) x.mutable_grad() = gradient(x, t);
        if (t == 1) {
          const torch::Tensor before = p[0].detach().clone();
          amp->step_amp(std::nullopt, inf);  // skipped: b does not step at t == 1 at all
          EXPECT_TRUE(torch::equal(before, p[0].detach())) << c.name << " " << impl_name(impl);
          continue;
        }
        amp->step_amp(std::nullopt, clean);
        b->step();
      }
      EXPECT_TRUE(torch::allclose(p[0], q[0], 1e-6, 1e-7)) << c.name << " " << impl_name(impl);
      EXPECT_TRUE(torch::allclose(p[1], q[1], 1e-6, 1e-7)) << c.name << " " << impl_name(impl);
    }
  }
}

// grad_scale: the gradients arrive multiplied by S and the step divides them.
TEST(Optimizers, GradScaleIsDividedOut) {
  for (const Case& c : cases()) {
    for (OptimizerImpl impl : {OptimizerImpl::kFused, OptimizerImpl::kForeach, OptimizerImpl::kReference}) {
      std::vector<torch::Tensor> p = make_params(), q = make_params();
      auto a = build(c, p, impl), b = build(c, q, impl);
      const torch::Tensor scale = torch::full({1}, 1024.0f);
      for (int t = 0; t < 3; ++t) {
        for (auto& x : p) x.mutable_grad() = gradient(x, t) * 1024.0;
        for (auto& x : q) x.mutable_grad() = gradient(x, t);
        dynamic_cast<AmpStepOptimizer&>(*a).step_amp(scale, torch::zeros({1}));
        b->step();
      }
      EXPECT_TRUE(torch::allclose(p[0], q[0], 1e-5, 1e-6)) << c.name << " " << impl_name(impl);
    }
  }
}

// A parameter that first gets a gradient at step 3 is bias-corrected for its own first step, as
// PyTorch's AdamW (and libtorch's, the reference path) keeps one step count per parameter; a single
// count for all would make its first update up to ~3x too large (issue #12).
TEST(Optimizers, AdamWCountsStepsPerParameter) {
  const Case& c = cases().back();
  for (OptimizerImpl impl : {OptimizerImpl::kFused, OptimizerImpl::kForeach}) {
    std::vector<torch::Tensor> p = make_params(), q = make_params();
    auto a = build(c, p, impl);
    auto b = build(c, q, OptimizerImpl::kReference);
    for (int t = 0; t < 5; ++t) {
      for (size_t i = 0; i < p.size(); ++i) {
        const bool late = i == 1 && t < 3;  // the second parameter sits out the first three steps
        p[i].mutable_grad() = late ? torch::Tensor() : gradient(p[i], t);
        q[i].mutable_grad() = late ? torch::Tensor() : gradient(q[i], t);
      }
      a->step();
      b->step();
      for (size_t i = 0; i < p.size(); ++i) {
        EXPECT_TRUE(torch::allclose(p[i], q[i], 1e-5, 1e-6)) << impl_name(impl) << " step " << t << " param " << i;
      }
    }
  }
}

TEST(Optimizers, CheckpointRoundTripKeepsAdamWStepCount) {
  const Case& c = cases().back();
  std::vector<torch::Tensor> p = make_params();
  auto a = build(c, p, OptimizerImpl::kFused);
  for (int t = 0; t < 3; ++t) {
    for (auto& x : p) x.mutable_grad() = gradient(x, t);
    a->step();
  }
  torch::serialize::OutputArchive out;
  a->save(out);
  std::ostringstream bytes;
  out.save_to(bytes);

  // A fresh optimizer loaded from the archive continues exactly as the original.
  std::vector<torch::Tensor> q;
  for (const auto& x : p) q.push_back(x.detach().clone().requires_grad_());
  auto b = build(c, q, OptimizerImpl::kFused);
  torch::serialize::InputArchive in;
  std::istringstream read(bytes.str());
  in.load_from(read);
  b->load(in);
  for (auto* opt : {a.get(), b.get()}) {
    auto& params = opt == a.get() ? p : q;
    for (auto& x : params) x.mutable_grad() = gradient(x, 3);
    opt->step();
  }
  EXPECT_TRUE(torch::allclose(p[0], q[0], 1e-7, 1e-8));
  EXPECT_TRUE(torch::allclose(p[1], q[1], 1e-7, 1e-8));
}

TEST(Optimizers, NoWeightDecayOnNormsAndBiases) {
  torch::nn::AnyModule model = models::create_model(models::compact_resnet({4}, {1}), {});
  auto sgd = make_optimizer(OptimizerOptions(), *model.ptr());
  ASSERT_EQ(sgd->param_groups().size(), 2u);
  for (const auto& p : sgd->param_groups()[0].params()) EXPECT_GT(p.dim(), 1);
  for (const auto& p : sgd->param_groups()[1].params()) EXPECT_LE(p.dim(), 1);
  EXPECT_EQ(static_cast<torch::optim::SGDOptions&>(sgd->param_groups()[1].options()).weight_decay(), 0.0);
  OptimizerOptions all;
  all.decay_norm_and_bias = true;
  all.algorithm = TypedOptions("adamw", std::make_unique<AdamWKeys>());
  EXPECT_EQ(make_optimizer(all, *model.ptr())->param_groups().size(), 1u);
}

TEST(ClipGradNorm, ScalesToTheMaxNormAndReportsTheNormBefore) {
  std::vector<torch::Tensor> p = make_params();
  p[0].mutable_grad() = torch::full({3, 4}, 3.0);  // norm sqrt(12 * 9) = 10.392
  p[1].mutable_grad() = torch::full({4}, 4.0);     // norm 8
  const double norm = std::sqrt(12 * 9.0 + 4 * 16.0);
  const torch::Tensor before = clip_grad_norm(p, 1.0);
  EXPECT_NEAR(before.item<double>(), norm, 1e-4);
  const double after = std::sqrt(p[0].grad().pow(2).sum().item<double>() + p[1].grad().pow(2).sum().item<double>());
  EXPECT_NEAR(after, 1.0, 1e-5);
  EXPECT_NEAR(p[0].grad()[0][0].item<double>(), 3.0 / norm, 1e-6);  // direction kept

  // Below the limit nothing changes.
  const torch::Tensor g = p[0].grad().clone();
  clip_grad_norm(p, 100.0);
  EXPECT_TRUE(torch::allclose(p[0].grad(), g));
}

TEST(Optimizers, UnknownImplementationIsAClearError) {
  const std::string message = testing::error_of([] { resolve_optimizer_impl("turbo", torch::kCPU); });
  EXPECT_CONTAINS(message, "optimizer.implementation 'turbo'");
  EXPECT_CONTAINS(message, "fused");
  EXPECT_EQ(resolve_optimizer_impl("auto", torch::kCPU), OptimizerImpl::kForeach);
  EXPECT_EQ(resolve_optimizer_impl("auto", torch::Device(torch::kCUDA, 0)), OptimizerImpl::kFused);
}

}  // namespace
}  // namespace stoker
