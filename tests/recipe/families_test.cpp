// The ViT, ConvNeXt, EfficientNet and MobileNetV3 families (models/vit.h, models/convnext.h,
// models/efficientnet.h, models/mobilenet_v3.h) through the default pipeline, each at a small
// configuration (or its smallest named one) on 32x32 RGB synthetic data: a run trains and its loss falls, an interrupted run
// resumes exactly, bf16-mixed and bf16-true (channels-last too) train, `trainer export` writes a state
// dict and TorchScript that give the checkpoint's logits; and, on a GPU, the fused attention kernels and
// CUDA graphs with both families (skipped here, saying why).
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <fstream>

#include "data/tensor_batches.h"
#include "models/flops.h"
#include "models/registry.h"
#include "models/vit.h"
#include "models/weights/state_dict.h"
#include "recipe/export.h"
#include "recipe/factory.h"
#include "recipe/resolve.h"
#include "recipe/run.h"
#include "recipe/tasks.h"
#include "test_config.h"
#include "trainer/checkpoint.h"

namespace stoker {
namespace {
namespace fs = std::filesystem;
using testing::TempDir;

struct Family {
  const char* name;
  const char* model;  // the YAML of `model:`
};

const Family kFamilies[] = {
    {"vit", "{type: vit, patch_size: 8, num_layers: 2, num_heads: 2, hidden_dim: 32, mlp_dim: 64}"},
    {"convnext", "{type: convnext, widths: [8, 16, 24, 32], depths: [1, 1, 2, 1]}"},
    // At their defaults: dropout, and EfficientNet's stochastic depth 0.2 (the random state must resume).
    {"efficientnet_b0", "{type: efficientnet_b0}"},
    {"mobilenet_v3_small", "{type: mobilenet_v3_small}"},
    {"mobilenet_v3_large", "{type: mobilenet_v3_large}"},
};

// Two epochs of 8 steps (batch 16) on 4 classes of striped 32x32 RGB images, AdamW, one thread.
Config family_config(const Family& f, const fs::path& runs) {
  const std::string yaml = fmt::format(R"(
run: {{name: {0}, dir: '{1}', seed: 3, device: cpu, threads: 1}}
data:
  type: synthetic
  num_classes: 4
  batch_size: 16
  eval_batch_size: 32
  workers: 0
  mean: [0.5, 0.5, 0.5]
  std: [0.25, 0.25, 0.25]
  synthetic: {{train_samples: 128, test_samples: 32, height: 32, width: 32, channels: 3}}
model: {2}
optimizer: {{type: adamw, lr: 0.003, weight_decay: 0.01}}
schedule: {{type: constant}}
train: {{epochs: 2, precision: fp32, log_every_steps: 2}}
)",
                                       f.name, runs.string(), f.model);
  return parse_config(yaml, std::string(f.name) + ".yaml");
}

using testing::StopAtStep;
using testing::weights;

class FamilyRun : public ::testing::TestWithParam<Family> {
 protected:
  TempDir runs_;
};

// The run resolves model.image_size from the data (ViT), trains, and its loss falls.
TEST_P(FamilyRun, TrainsWithTheDefaultPipelineAndItsLossFalls) {
  TrainRequest request;
  request.config = family_config(GetParam(), runs_.path());
  const TrainOutcome out = run_training(request);
  EXPECT_EQ(out.state.step, 16);
  ASSERT_EQ(out.fit.epochs.size(), 2u);
  EXPECT_LT(out.fit.epochs.back().train_loss, 0.8 * out.fit.epochs.front().train_loss);
  EXPECT_GT(out.fit.epochs.back().train_top1, 0.4);  // above chance (4 classes)
  // EfficientNet's and MobileNetV3's batch norms keep their running statistics with torchvision's
  // momentum 0.01: after 16 steps they are still near their start (mean 0, variance 1), so the
  // eval-mode test accuracy of so short a run says nothing; the other families' is above chance.
  const std::string name = GetParam().name;
  if (name == "vit" || name == "convnext") EXPECT_GT(out.final_test.top1, 0.25);
  const std::string saved = testing::read_bytes(out.run_dir / "config.yaml");
  if (std::string(GetParam().name) == "vit") EXPECT_NE(saved.find("image_size: 32"), std::string::npos) << saved;
}

// Stopped mid-epoch, checkpointed and continued in a fresh set-up whose model starts elsewhere: the
// same weights as one straight run.
TEST_P(FamilyRun, ResumesExactlyAfterAnInterruption) {
  const Config config = family_config(GetParam(), runs_.path());
  torch::manual_seed(1);
  TrainingSetup straight = make_training(config);
  straight.trainer->fit();
  const std::vector<torch::Tensor> expected = weights(*straight.trainer);

  TrainingSetup first = make_training(config);
  first.trainer->add_callback(std::make_shared<StopAtStep>(11));
  EXPECT_TRUE(first.trainer->fit().interrupted);
  first.trainer->save_checkpoint(runs_ / "mid.pt");

  TrainingSetup second = make_training(config);
  {
    torch::NoGradGuard no_grad;  // other weights: everything must come from the checkpoint
    for (auto& p : second.trainer->module().parameters()) p.normal_();
  }
  second.trainer->load_checkpoint(runs_ / "mid.pt");
  EXPECT_EQ(second.trainer->state().step, 11);
  EXPECT_FALSE(second.trainer->fit().interrupted);
  const std::vector<torch::Tensor> got = weights(*second.trainer);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(torch::allclose(got[i], expected[i], 1e-5, 1e-6)) << i;
}

// bf16-mixed and bf16-true (channels-last for the latter) run and the loss falls; bf16-true keeps
// every parameter in bfloat16.
TEST_P(FamilyRun, Bf16MixedAndBf16TrueTrain) {
  for (const Precision precision : {Precision::kBf16Mixed, Precision::kBf16True}) {
    SCOPED_TRACE(precision_name(precision));
    Config config = family_config(GetParam(), runs_.path());
    config.train.precision = precision;
    config.train.channels_last = precision == Precision::kBf16True;
    TrainingSetup setup = make_training(config);
    const FitResult fit = setup.trainer->fit();
    ASSERT_EQ(fit.epochs.size(), 2u);
    EXPECT_TRUE(std::isfinite(fit.epochs.back().train_loss));
    EXPECT_LT(fit.epochs.back().train_loss, 0.9 * fit.epochs.front().train_loss);
    if (precision == Precision::kBf16True) {
      for (const auto& p : setup.trainer->module().parameters()) EXPECT_EQ(p.scalar_type(), torch::kBFloat16);
    }
  }
}

// `trainer export` of the run's checkpoint, from its saved config alone: the state dict loads strict
// into a fresh model, and the TorchScript file gives the checkpoint's logits.
TEST_P(FamilyRun, ExportsStateDictAndTorchScript) {
  TrainRequest request;
  request.config = family_config(GetParam(), runs_.path());
  request.config.train.epochs = 1;
  const TrainOutcome out = run_training(request);
  const fs::path checkpoint = out.run_dir / "checkpoints" / "last.pt";

  const Config saved = parse_config(read_checkpoint_config(checkpoint), "saved");
  torch::nn::AnyModule model = make_model(saved, {3});  // the size from the saved config (a ViT's image_size)
  load_checkpoint(checkpoint, *model.ptr(), nullptr, torch::kCPU);
  model.ptr()->eval();
  torch::manual_seed(4);
  const torch::Tensor x = torch::randn({2, 3, 32, 32});
  torch::NoGradGuard no_grad;
  const torch::Tensor logits = model.forward(x);

  ExportRequest e;
  e.checkpoint = checkpoint;
  e.output = runs_ / "weights.pth";
  export_checkpoint(e);
  torch::nn::AnyModule fresh = make_model(saved, {3});
  models::weights::load_state_dict(*fresh.ptr(), e.output);
  fresh.ptr()->eval();
  EXPECT_TRUE(torch::allclose(fresh.forward(x), logits, 1e-5, 1e-5));

  e.format = "torchscript";
  e.output = runs_ / "model.ts";
  export_checkpoint(e);
  torch::jit::Module scripted = torch::jit::load(e.output.string());
  EXPECT_TRUE(torch::allclose(scripted.forward({x}).toTensor(), logits, 1e-5, 1e-5));
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyRun, ::testing::ValuesIn(kFamilies),
                         [](const ::testing::TestParamInfo<Family>& info) { return std::string(info.param.name); });

// ---- on a GPU -------------------------------------------------------------------------------------

const torch::Device kGpu(torch::kCUDA, 0);

// The ViT's attention on CUDA: SDPA picks a fused kernel (not the math path) for the q, k and v views
// SelfAttention makes, in bf16 and float32; the FLOPs counted there equal the CPU's (the fused kernels'
// products counted); the bf16 logits agree with the CPU's float32 ones.
TEST(FamiliesGpu, VitAttentionRunsAFusedKernelOnCuda) {
  STOKER_NEEDS_CUDA();
  for (const torch::ScalarType dtype : {torch::kBFloat16, torch::kFloat32}) {
    const torch::Tensor qkv = torch::randn({4, 17, 3, 2, 16}, torch::TensorOptions().device(kGpu).dtype(dtype))
                                  .permute({2, 0, 3, 1, 4});
    const int64_t backend = at::_fused_sdp_choice(qkv[0], qkv[1], qkv[2], {}, 0.0, false, std::nullopt, false);
    EXPECT_GT(backend, 0) << "at::_fused_sdp_choice chose the math path (0) for " << dtype;
  }
  const Config config = parse_config(std::string("model: ") + kFamilies[0].model + "\n", "vit.yaml");
  torch::manual_seed(2);
  torch::nn::AnyModule model = models::create_model(config.model, {3, 10, 32, 32});
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model.ptr()->parameters()) p.normal_(0.0, 0.1);
  }
  const double cpu_flops = models::count_forward_flops(model, {3, 32, 32}).flops();
  model.ptr()->eval();
  const torch::Tensor x = torch::randn({4, 3, 32, 32});
  torch::NoGradGuard no_grad;
  const torch::Tensor cpu = model.forward(x);
  model.ptr()->to(kGpu);
  EXPECT_DOUBLE_EQ(models::count_forward_flops(model, {3, 32, 32}).flops(), cpu_flops);
  model.ptr()->to(kGpu, torch::kBFloat16);
  const torch::Tensor gpu = model.forward(x.to(kGpu, torch::kBFloat16)).to(torch::kCPU, torch::kFloat32);
  EXPECT_LT((gpu - cpu).abs().max().item<double>(), 0.05 * std::max(1.0, cpu.abs().max().item<double>()));
}

// A CUDA graph of each family's step (bf16-mixed) gives the eager steps' weights.
TEST(FamiliesGpu, GraphedStepsEqualEagerOnes) {
  STOKER_NEEDS_CUDA();
  for (const Family& f : kFamilies) {
    SCOPED_TRACE(f.name);
    Config c = parse_config(std::string("run: {device: cuda}\ndata: {num_classes: 4, batch_size: 8}\nmodel: ") +
                                f.model + "\ntrain: {epochs: 1, precision: bf16-mixed}\n",
                            "gpu.yaml");
    Config g = c;
    g.train.cuda_graph = true;
    torch::manual_seed(11);
    auto data = std::make_shared<data::TensorBatches>(torch::randn({64, 3, 32, 32}), torch::randint(4, {64}), 8, kGpu,
                                                      /*shuffle=*/false);
    const auto model = [&] {
      torch::manual_seed(3);
      return make_model(c, {3, 32, 32});
    };
    auto eager = make_trainer(c, model(), data, nullptr, kGpu);
    auto graphed = make_trainer(g, model(), data, nullptr, kGpu);
    data->start_epoch(0);
    std::vector<data::Batch> batches;
    while (auto b = data->next()) batches.push_back(*b);
    for (const data::Batch& b : batches) eager->train_step(b);
    for (const data::Batch& b : batches) graphed->train_step(b);
    EXPECT_TRUE(graphed->graph_active());
    const auto pe = eager->module().parameters(), pg = graphed->module().parameters();
    for (size_t i = 0; i < pe.size(); ++i) EXPECT_TRUE(torch::allclose(pe[i], pg[i], 1e-2, 1e-4)) << "parameter " << i;
  }
}

}  // namespace
}  // namespace stoker
