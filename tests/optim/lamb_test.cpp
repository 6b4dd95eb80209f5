// LAMB (optimizer.type: lamb) against timm 1.0's Lamb (checked-in golden values,
// tests/golden/lamb_golden.h, written by tests/golden/lamb_golden.py), under the loss scaler, and
// built from the config through the optimizer registry.
#include "optim/lamb.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/record_function.h>

#include <cmath>
#include <memory>
#include <sstream>

#include "golden/lamb_golden.h"
#include "optim/sharding.h"
#include "test_util.h"

#ifdef STOKER_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace stoker {
namespace {

// Must match SHAPES, GRAD_SCALES, LRS, WEIGHT_DECAY, start() and grad() in tests/golden/lamb_golden.py.
const std::vector<std::vector<int64_t>> kShapes = {{3, 4}, {5}, {4}};
const std::vector<double> kGradScales = {0.05, 2.0, 0.3, 5.0, 0.1};
const std::vector<double> kLrs = {0.01, 0.008, 0.012, 0.005, 0.009};
constexpr double kWeightDecay = 0.02;

torch::Tensor lamb_start(int64_t k, const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const torch::Tensor i = torch::arange(n, torch::kFloat64);
  return (torch::cos(0.23 * i + static_cast<double>(k)) * (0.5 + 1.5 * static_cast<double>(k))).reshape(shape);
}

torch::Tensor lamb_grad(int64_t step, int64_t k, const torch::Tensor& p) {
  const torch::Tensor i = torch::arange(p.numel(), torch::kFloat64);
  return (torch::sin(0.37 * i + 1.1 * static_cast<double>(step) + 0.5 * static_cast<double>(k)) * kGradScales[step])
      .reshape(p.sizes());
}

std::vector<torch::Tensor> golden_params() {
  std::vector<torch::Tensor> params;
  for (size_t k = 0; k < kShapes.size(); ++k) params.push_back(lamb_start(static_cast<int64_t>(k), kShapes[k]).requires_grad_());
  return params;
}

// LAMB over the golden parameters in two groups: decayed, not.
std::unique_ptr<Lamb> make_lamb(const std::vector<torch::Tensor>& params, const LambKeys& keys) {
  const auto options = [&](double wd) {
    return torch::optim::AdamWOptions(kLrs[0]).betas({keys.betas[0], keys.betas[1]}).eps(keys.eps).weight_decay(wd);
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{params[0], params[1]},
                      std::make_unique<torch::optim::AdamWOptions>(options(kWeightDecay)));
  groups.emplace_back(std::vector<torch::Tensor>{params[2]}, std::make_unique<torch::optim::AdamWOptions>(options(0)));
  return std::make_unique<Lamb>(groups, options(kWeightDecay), keys);
}

// Golden steps [from, to), the gradients times `loss_scale` and divided by it inside the step (1: no scaler).
void take_steps(Lamb& lamb, std::vector<torch::Tensor>& params, size_t from, size_t to, double loss_scale) {
  for (size_t step = from; step < to; ++step) {
    lamb.set_lr(kLrs[step]);
    for (size_t k = 0; k < params.size(); ++k) {
      params[k].mutable_grad() = lamb_grad(static_cast<int64_t>(step), static_cast<int64_t>(k), params[k]) * loss_scale;
    }
    if (loss_scale == 1.0) {
      lamb.step();
    } else {
      lamb.step_amp(torch::full({1}, loss_scale, torch::kFloat32), torch::zeros({1}, torch::kFloat32));
    }
  }
}

std::vector<double> flat(const std::vector<torch::Tensor>& params) {
  std::vector<double> out;
  for (const auto& p : params) {
    const torch::Tensor f = p.detach().flatten();
    for (int64_t i = 0; i < f.numel(); ++i) out.push_back(f[i].item<double>());
  }
  return out;
}

// Five steps of `keys` over the golden parameters; the parameters, flattened.
std::vector<double> run(const LambKeys& keys, double loss_scale) {
  std::vector<torch::Tensor> params = golden_params();
  auto lamb = make_lamb(params, keys);
  take_steps(*lamb, params, 0, kLrs.size(), loss_scale);
  return flat(params);
}

LambKeys keys_of(const golden::LambCase& c) {
  LambKeys keys;
  keys.max_grad_norm = c.max_grad_norm;
  keys.trust_clip = c.trust_clip;
  keys.always_adapt = c.always_adapt;
  return keys;
}

TEST(Lamb, MatchesTimmsGoldenValues) {
  for (const auto& c : golden::kLambCases) {
    const std::vector<double> got = run(keys_of(c), 1.0);
    ASSERT_EQ(got.size(), c.params.size()) << c.name;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], c.params[i], 1e-9 * std::max(1.0, std::abs(c.params[i]))) << c.name << " value " << i;
    }
  }
}

// The golden cases differ where they should: each option changes something (no test that cannot fail).
TEST(Lamb, EveryGoldenCaseDiffersFromTheDefaults) {
  for (size_t c = 1; c < golden::kLambCases.size(); ++c) {
    EXPECT_NE(golden::kLambCases[c].params, golden::kLambCases[0].params) << golden::kLambCases[c].name;
  }
}

TEST(Lamb, LossScaledGradientsGiveTheSameSteps) {
  const LambKeys keys = keys_of(golden::kLambCases[0]);
  const std::vector<double> plain = run(keys, 1.0), scaled = run(keys, 1024.0);
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_NEAR(scaled[i], plain[i], 1e-7) << i;
}

// A run saved after two steps and loaded into a new optimizer continues as if uninterrupted.
TEST(Lamb, ResumesExactlyFromItsSavedState) {
  std::vector<torch::Tensor> params = golden_params();
  auto first = make_lamb(params, LambKeys());
  take_steps(*first, params, 0, 2, 1.0);
  std::stringstream saved;
  torch::save(*first, saved);
  auto second = make_lamb(params, LambKeys());
  torch::load(*second, saved);
  take_steps(*second, params, 2, kLrs.size(), 1.0);
  EXPECT_EQ(flat(params), run(LambKeys(), 1.0));
}

TEST(Lamb, SkipsAStepWithInfiniteGradients) {
  torch::Tensor p = lamb_start(1, {5}).requires_grad_();
  const torch::Tensor before = p.detach().clone();
  Lamb lamb({torch::optim::OptimizerParamGroup({p})}, torch::optim::AdamWOptions(0.01), LambKeys());
  p.mutable_grad() = torch::ones_like(p);
  lamb.step_amp(torch::ones({1}), torch::ones({1}));
  EXPECT_TRUE(torch::equal(p.detach(), before));
  lamb.step_amp(torch::ones({1}), torch::zeros({1}));
  EXPECT_FALSE(torch::equal(p.detach(), before));
}

// Counts the operators called on this thread at the top level (not from inside another operator)
// while it lives: what a step launches on a GPU, one kernel or more each.
class TopLevelOperators {
 public:
  TopLevelOperators() {
    depth() = count() = 0;
    handle_ = at::addThreadLocalCallback(
        at::RecordFunctionCallback(
            [](const at::RecordFunction&) -> std::unique_ptr<at::ObserverContext> {
              if (depth()++ == 0) ++count();
              return nullptr;
            },
            [](const at::RecordFunction&, at::ObserverContext*) { --depth(); })
            .scopes({at::RecordScope::FUNCTION}));
  }
  ~TopLevelOperators() { at::removeCallback(handle_); }
  static int64_t& count() {
    static thread_local int64_t n = 0;
    return n;
  }

 private:
  static int64_t& depth() {
    static thread_local int64_t d = 0;
    return d;
  }
  at::CallbackHandle handle_;
};

// The operators of one loss-scaled step of LAMB over `n` parameters with weight decay (global clipping
// and the trust ratio on), once its state exists.
int64_t operators_per_step(int64_t n) {
  std::vector<torch::Tensor> params;
  for (int64_t k = 0; k < n; ++k) params.push_back(lamb_start(k, {4, 3}).to(torch::kFloat32).requires_grad_());
  Lamb lamb({torch::optim::OptimizerParamGroup(params)}, torch::optim::AdamWOptions(0.01).weight_decay(0.02),
            LambKeys());
  for (int step = 0; step < 2; ++step) {
    for (int64_t k = 0; k < n; ++k) params[k].mutable_grad() = lamb_grad(step, k % 5, params[k]).to(torch::kFloat32);
    const torch::Tensor scale = torch::full({1}, 8.0f), found_inf = torch::zeros({1});
    if (step == 0) {
      lamb.step_amp(scale, found_inf);
      continue;
    }
    TopLevelOperators counted;
    lamb.step_amp(scale, found_inf);
    return TopLevelOperators::count();
  }
  return -1;
}

// Issue 33, G23: the step is foreach operations over each group, not ~15 kernels per parameter: the
// operators a step calls do not grow with the number of parameters.
TEST(Lamb, AStepsOperatorsDoNotGrowWithTheParameters) {
  const int64_t few = operators_per_step(3), many = operators_per_step(30);
  EXPECT_GT(few, 0);
  EXPECT_EQ(many, few) << "3 parameters: " << few << " operators, 30: " << many;
  EXPECT_LT(many, 40);
}

// With train.cuda_graph the run says why LAMB is not captured (not that it needs a fused implementation).
TEST(Lamb, SaysWhyItCannotBeCaptured) {
  torch::Tensor p = lamb_start(1, {5}).requires_grad_();
  Lamb lamb({torch::optim::OptimizerParamGroup({p})}, torch::optim::AdamWOptions(0.01), LambKeys());
  EXPECT_FALSE(lamb.capturable());
  EXPECT_CONTAINS(lamb.capture_obstacle(), "optimizer.type lamb keeps each parameter's step count on the host");
  EXPECT_CONTAINS(lamb.capture_obstacle(), "use sgd or adamw");
}

// ZeRO-1 (issue 41): a rank that holds no piece of any parameter still takes part in the sums over the
// ranks, on the shards' device (NCCL takes CUDA tensors only; before, its sums were CPU tensors). The
// meta device stands in for CUDA here: any device but the CPU shows it.
TEST(Lamb, ARankWithoutPiecesSumsOnTheShardsDevice) {
  Lamb lamb({torch::optim::OptimizerParamGroup(std::vector<torch::Tensor>{})},
            torch::optim::AdamWOptions(0.01).weight_decay(0.01), LambKeys());  // max_grad_norm 1: global clipping
  std::vector<torch::Device> summed_on;
  ParameterShards shards;
  shards.parameters = 3;
  shards.device = torch::kMeta;
  shards.sum_over_ranks = [&](torch::Tensor& t) { summed_on.push_back(t.device()); };
  lamb.set_shards(shards);
  lamb.step();
  ASSERT_EQ(summed_on.size(), 2u);  // the gradients' global norm, then the trust ratios' norms
  for (const torch::Device& d : summed_on) EXPECT_EQ(d, torch::Device(torch::kMeta));
}

TEST(Lamb, IsBuiltFromTheConfigWithDecayedAndUndecayedGroups) {
  OptimizerOptions o;
  o.algorithm = TypedOptions("lamb", std::make_unique<LambKeys>());
  o.lr = 0.008;
  o.weight_decay = 0.02;
  torch::nn::Linear linear(4, 3);
  auto optimizer = make_optimizer(o, *linear);
  ASSERT_NE(dynamic_cast<Lamb*>(optimizer.get()), nullptr);
  ASSERT_EQ(optimizer->param_groups().size(), 2u);
  const auto& decayed = static_cast<const torch::optim::AdamWOptions&>(optimizer->param_groups()[0].options());
  const auto& undecayed = static_cast<const torch::optim::AdamWOptions&>(optimizer->param_groups()[1].options());
  EXPECT_DOUBLE_EQ(decayed.weight_decay(), 0.02);
  EXPECT_DOUBLE_EQ(undecayed.weight_decay(), 0.0);
  EXPECT_DOUBLE_EQ(decayed.eps(), 1e-6);
}

}  // namespace
}  // namespace stoker

namespace stoker {
namespace {

// ZeRO-1 + LAMB on CUDA (issue 41): the pieces' parameter indices are copied to the device once, not at
// every step: after the first step, steps run with PyTorch's sync debug mode at the error level, where a
// copy from pageable host memory (it waits for the device) throws.
TEST(LambGpu, ShardedStepsCopyNoIndexToTheDeviceAfterTheFirst) {
  STOKER_NEEDS_CUDA_KERNELS();
#ifdef STOKER_WITH_CUDA
  const torch::Device gpu(torch::kCUDA, 0);
  torch::manual_seed(1);
  torch::Tensor a = torch::randn({4, 3}, gpu).requires_grad_(true), b = torch::randn({5}, gpu).requires_grad_(true);
  Lamb lamb({torch::optim::OptimizerParamGroup({a, b})}, torch::optim::AdamWOptions(0.01).weight_decay(0.01),
            LambKeys());
  ParameterShards shards;
  shards.whole[a.unsafeGetTensorImpl()] = 0;
  shards.whole[b.unsafeGetTensorImpl()] = 1;
  shards.parameters = 2;
  shards.device = gpu;
  std::vector<torch::Device> summed_on;
  shards.sum_over_ranks = [&](torch::Tensor& t) { summed_on.push_back(t.device()); };
  lamb.set_shards(shards);
  const auto step = [&] {
    lamb.zero_grad();
    ((a * a).sum() + (b * b).sum()).backward();
    lamb.step();
  };
  step();
  auto& state = c10::cuda::warning_state();
  state.set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
  std::string error;
  try {
    for (int i = 0; i < 3; ++i) step();
  } catch (const std::exception& e) {
    error = e.what();
  }
  state.set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
  EXPECT_EQ(error, "") << "a step after the first waited for the device";
  for (const torch::Device& d : summed_on) EXPECT_EQ(d, gpu);
#endif
}

}  // namespace
}  // namespace stoker
