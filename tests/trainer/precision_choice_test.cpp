// train.precision: auto (issue 19): each capability answer forced through cpu_features/cuda_features
// and the choice checked on recorded step times; an explicit slow precision warned about; a resumed
// run keeps the precision it chose.
#include "trainer/precision_choice.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "data/cache.h"
#include "test_config.h"
#include "recipe/factory.h"
#include "recipe/run.h"

namespace stoker {
namespace {
namespace fs = std::filesystem;

// cpuinfo's flags (at::cpu::get_cpu_capabilities) of three CPUs.
std::map<std::string, bool> avx2_only() {  // issue 19's AMD EPYC (family 25): AVX2, FMA, F16C
  return {{"avx2", true}, {"fma3", true}, {"f16c", true}, {"avx512_f", false}, {"avx512_bf16", false}};
}
std::map<std::string, bool> avx512_bf16() {  // the development machine: an Intel Xeon with AVX512_BF16
  return {{"avx2", true},     {"fma3", true},        {"avx512_f", true}, {"avx512_bw", true},
          {"avx512_vl", true}, {"avx512_dq", true},  {"avx512_bf16", true}, {"avx_vnni", true}};
}
std::map<std::string, bool> avx512_plain() {  // Skylake-SP: an AVX-512 core without bf16 dot products
  return {{"avx2", true}, {"fma3", true}, {"avx512_f", true}, {"avx512_bw", true}, {"avx512_vl", true},
          {"avx512_dq", true}};
}

TEST(PrecisionChoice, Avx2OnlyCpuTrainsFp32WithoutTimingBf16) {
  const HardwareFeatures hw = cpu_features(avx2_only(), "AMD EPYC", "");
  EXPECT_FALSE(hw.onednn_bf16);
  EXPECT_FALSE(hw.native_bf16);
  const PrecisionPlan plan = plan_auto_precision(hw);
  ASSERT_EQ(plan.candidates, std::vector<Precision>{Precision::kFp32});
  EXPECT_CONTAINS(plan.reason, "reference code");
  EXPECT_CONTAINS(hw.summary(), "AMD EPYC: AVX2 FMA (no AVX-512, AVX512_BF16");
  const std::string line = describe_choice(Precision::kFp32, plan, {}, hw);
  EXPECT_CONTAINS(line, "train.precision: auto -> fp32 (not timed: no oneDNN bf16 path on this CPU");
  EXPECT_CONTAINS(line, ") on AMD EPYC: AVX2 FMA");
  EXPECT_FALSE(runs_natively(Precision::kBf16Mixed, hw));
}

TEST(PrecisionChoice, NativeBf16CpuTimesBothAndKeepsTheFaster) {
  const HardwareFeatures hw = cpu_features(avx512_bf16(), "Intel Xeon", "");
  EXPECT_TRUE(hw.onednn_bf16);
  EXPECT_TRUE(hw.native_bf16);
  const PrecisionPlan plan = plan_auto_precision(hw);
  ASSERT_EQ(plan.candidates, (std::vector<Precision>{Precision::kBf16Mixed, Precision::kFp32}));
  // The development machine's numbers (bench-step, fashion_mnist.yaml): bf16 wins.
  const std::vector<StepTime> measured = {{Precision::kBf16Mixed, 41.0, 5}, {Precision::kFp32, 68.0, 5}};
  EXPECT_EQ(pick_fastest(measured), Precision::kBf16Mixed);
  const std::string line = describe_choice(Precision::kBf16Mixed, plan, measured, hw);
  EXPECT_CONTAINS(line, "auto -> bf16-mixed (a training step: bf16-mixed 41.0 ms, fp32 68.0 ms; 1.66x faster) on");
  EXPECT_CONTAINS(line, "oneDNN runs bf16 natively");
  // Were fp32 faster on such a CPU (a tiny model whose casts dominate), fp32 would be kept.
  EXPECT_EQ(pick_fastest({{Precision::kBf16Mixed, 50.0, 5}, {Precision::kFp32, 30.0, 5}}), Precision::kFp32);
  // Within 3%, the plan's first candidate keeps it: noise does not flip the choice.
  EXPECT_EQ(pick_fastest({{Precision::kBf16Mixed, 40.0, 5}, {Precision::kFp32, 39.5, 5}}), Precision::kBf16Mixed);
}

TEST(PrecisionChoice, EmulatedBf16PrefersFp32UnlessTimedFaster) {
  const HardwareFeatures hw = cpu_features(avx512_plain(), "Intel Xeon Gold 6148", "");
  EXPECT_TRUE(hw.onednn_bf16);
  EXPECT_FALSE(hw.native_bf16);
  EXPECT_CONTAINS(hw.summary(), "oneDNN emulates bf16");
  ASSERT_EQ(plan_auto_precision(hw).candidates, (std::vector<Precision>{Precision::kFp32, Precision::kBf16Mixed}));
}

TEST(PrecisionChoice, OneDnnIsaCapIsHonoured) {
  // ONEDNN_MAX_CPU_ISA=AVX2 on the development machine reproduces issue 19's CPU: ATen then runs bf16
  // convolutions in its reference code (measured: bf16-mixed 5x slower than fp32 there).
  HardwareFeatures hw = cpu_features(avx512_bf16(), "Intel Xeon", "AVX2");
  EXPECT_FALSE(hw.onednn_bf16);
  EXPECT_EQ(plan_auto_precision(hw).candidates, std::vector<Precision>{Precision::kFp32});
  EXPECT_CONTAINS(hw.summary(), "ONEDNN_MAX_CPU_ISA=AVX2");
  hw = cpu_features(avx512_bf16(), "Intel Xeon", "avx512_core");  // oneDNN accepts either case
  EXPECT_TRUE(hw.onednn_bf16);
  EXPECT_FALSE(hw.native_bf16);
  hw = cpu_features(avx512_bf16(), "Intel Xeon", "ALL");
  EXPECT_TRUE(hw.native_bf16);
  // AVX2-VNNI-2 CPUs (AVX-NE-CONVERT) have oneDNN's bf16 path without AVX-512.
  std::map<std::string, bool> vnni2 = avx2_only();
  vnni2["avx_vnni"] = vnni2["avx_vnni_int8"] = vnni2["avx_ne_convert"] = true;
  EXPECT_TRUE(cpu_features(vnni2, "Intel Xeon 6700E", "").native_bf16);
}

TEST(PrecisionChoice, CudaChoosesByComputeCapability) {
  EXPECT_EQ(plan_auto_precision(cuda_features("NVIDIA H100 80GB HBM3", 90)).candidates,
            (std::vector<Precision>{Precision::kBf16Mixed, Precision::kTf32}));
  EXPECT_EQ(plan_auto_precision(cuda_features("Tesla T4", 75)).candidates,
            (std::vector<Precision>{Precision::kFp16Mixed, Precision::kFp32}));
  EXPECT_EQ(plan_auto_precision(cuda_features("Tesla P100", 60)).candidates, std::vector<Precision>{Precision::kFp32});
  EXPECT_TRUE(runs_natively(Precision::kFp16Mixed, cuda_features("Tesla T4", 75)));
  EXPECT_FALSE(runs_natively(Precision::kBf16Mixed, cuda_features("Tesla T4", 75)));
  EXPECT_CONTAINS(cuda_features("NVIDIA H100 80GB HBM3", 90).summary(), "(sm_90): bf16 tensor cores");
}

TEST(PrecisionChoice, ExplicitSlowPrecisionIsWarnedAbout) {
  const HardwareFeatures hw = cpu_features(avx2_only(), "AMD EPYC", "");
  // Issue 19's numbers: bf16-mixed 2,146 ms against fp32's 263 ms per step.
  const auto warning = slow_precision_warning({Precision::kBf16Mixed, 2146, 3}, {Precision::kFp32, 263, 3}, hw);
  ASSERT_TRUE(warning.has_value());
  EXPECT_CONTAINS(*warning, "train.precision: bf16-mixed takes 2146.0 ms per training step here, 8.2x float32's");
  EXPECT_CONTAINS(*warning, "--set train.precision=fp32 (or auto)");
  EXPECT_FALSE(slow_precision_warning({Precision::kBf16Mixed, 500, 3}, {Precision::kFp32, 263, 3}, hw));  // 1.9x
  EXPECT_FALSE(slow_precision_warning({Precision::kBf16Mixed, 41, 3}, {Precision::kFp32, 68, 3}, hw));
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

// A run that chose bf16-mixed continues in it when resumed with `auto`, even where auto would now
// choose float32 (here: oneDNN capped at AVX2, which the detection reads from the environment).
TEST(PrecisionChoice, ResumeKeepsThePrecisionTheRunChose) {
  testing::TempDir data, runs;
  testing::write_synthetic_idx_dataset(data.path(), 128, 64, 12);
  TrainRequest first;
  first.config = testing::tiny_config(data.path(), runs.path());
  first.config.train.precision = Precision::kBf16Mixed;
  first.config.train.epochs = 1;
  const TrainOutcome one = run_training(first);

  ::setenv("ONEDNN_MAX_CPU_ISA", "AVX2", 1);
  TrainRequest again;
  again.config = first.config;
  again.config.train.precision = Precision::kAuto;
  again.config.train.epochs = 2;
  again.allow_config_change = true;
  again.resume = one.run_dir;
  const TrainOutcome two = run_training(again);
  ::unsetenv("ONEDNN_MAX_CPU_ISA");
  EXPECT_EQ(two.state.epoch, 2);
  const Config resumed = load_config(two.run_dir / fmt::format("config.resumed-step{}.yaml", one.state.step));
  EXPECT_EQ(resumed.train.precision, Precision::kBf16Mixed);
}

}  // namespace
}  // namespace stoker
