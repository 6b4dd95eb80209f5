// train.precision: auto's candidates (trainer/precision_choice.h) for each kind of hardware, forced
// through cpu_features/cuda_features; the loop refuses an undecided `auto`. The timing and the choice
// among the candidates are the recipe layer's (tests/recipe/precision_trial_test.cpp).
#include "trainer/precision_choice.h"

#include <gtest/gtest.h>

#include <torch/torch.h>

#include "data/cache.h"
#include "test_util.h"
#include "trainer/trainer.h"

namespace stoker {
namespace {

TEST(PrecisionChoice, CandidatesFollowTheCpu) {
  const std::map<std::string, bool> avx2 = {{"avx2", true}, {"fma3", true}};
  const PrecisionPlan epyc = plan_auto_precision(cpu_features(avx2, "AMD EPYC", ""));
  ASSERT_EQ(epyc.candidates, std::vector<Precision>{Precision::kFp32});
  EXPECT_CONTAINS(epyc.reason, "reference code");
  std::map<std::string, bool> core = {{"avx2", true}, {"fma3", true}, {"avx512_f", true}, {"avx512_bw", true},
                                      {"avx512_vl", true}, {"avx512_dq", true}};
  EXPECT_EQ(plan_auto_precision(cpu_features(core, "Skylake", "")).candidates,
            (std::vector<Precision>{Precision::kFp32, Precision::kBf16Mixed}));  // emulated bf16: fp32 first
  core["avx512_bf16"] = true;
  const HardwareFeatures native = cpu_features(core, "Intel Xeon", "");
  EXPECT_EQ(plan_auto_precision(native).candidates, (std::vector<Precision>{Precision::kBf16Mixed, Precision::kFp32}));
  EXPECT_TRUE(runs_natively(Precision::kBf16Mixed, native));
  EXPECT_FALSE(runs_natively(Precision::kBf16Mixed, cpu_features(avx2, "AMD EPYC", "")));
  EXPECT_EQ(plan_auto_precision(cpu_features(core, "Intel Xeon", "AVX2")).candidates,
            std::vector<Precision>{Precision::kFp32});  // oneDNN capped below its bf16 path
}

TEST(PrecisionChoice, CudaChoosesByComputeCapability) {
  EXPECT_EQ(plan_auto_precision(cuda_features("NVIDIA H100 80GB HBM3", 90)).candidates,
            (std::vector<Precision>{Precision::kBf16Mixed, Precision::kTf32}));
  EXPECT_EQ(plan_auto_precision(cuda_features("Tesla T4", 75)).candidates,
            (std::vector<Precision>{Precision::kFp16Mixed, Precision::kFp32}));
  EXPECT_EQ(plan_auto_precision(cuda_features("Tesla P100", 60)).candidates, std::vector<Precision>{Precision::kFp32});
  EXPECT_TRUE(runs_natively(Precision::kFp16Mixed, cuda_features("Tesla T4", 75)));
  EXPECT_FALSE(runs_natively(Precision::kBf16Mixed, cuda_features("Tesla T4", 75)));
}

TEST(PrecisionChoice, TheLoopRefusesAuto) {
  TrainerOptions o;
  o.precision = Precision::kAuto;
  EXPECT_EQ(parse_precision("auto"), Precision::kAuto);
  EXPECT_EQ(precision_name(Precision::kAuto), "auto");
  torch::nn::Linear net(4, 2);
  TrainerParts parts;
  parts.model = torch::nn::AnyModule(net);
  parts.optimizer = std::make_unique<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(0.1));
  std::vector<data::Batch> batches(1);
  batches[0].input = torch::zeros({2, 4});
  batches[0].target = torch::zeros({2}, torch::kLong);
  auto source = std::make_shared<data::CachedBatchSource>(batches, 1, 4, 1, 1);
  EXPECT_CONTAINS(testing::error_of([&] { Trainer(o, std::move(parts), source, source); }), "precision is auto");
}

}  // namespace
}  // namespace stoker
