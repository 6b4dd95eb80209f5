// EfficientNet and MobileNetV3 (models/efficientnet.h, models/mobilenet_v3.h) through the default
// pipeline, on small synthetic gray images: every precision with channels-last trains on the CPU
// (the loss on a batch falls), a one-epoch run writes its run directory, a run stopped mid-epoch
// resumes from its checkpoint exactly (dropout and stochastic depth on: the random state comes
// back too), and `trainer export` writes TorchScript that gives the checkpoint's logits.
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <cmath>

#include "models/registry.h"
#include "recipe/device.h"
#include "recipe/factory.h"
#include "recipe/run.h"
#include "recipe/tasks.h"
#include "test_config.h"
#include "trainer/checkpoint.h"

namespace stoker {
namespace {
namespace fs = std::filesystem;

class MobileFamilies : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { testing::write_synthetic_idx_dataset(data_.path(), 192, 64, 16); }

  // The tests' tiny config with this family's model at its defaults (dropout, and for EfficientNet
  // stochastic depth 0.2): 6 steps of 32 an epoch.
  Config config() const {
    Config c = testing::tiny_config(data_.path(), runs_.path());
    c.model = models::model_options(GetParam());
    c.train.epochs = 2;
    return c;
  }

  std::unique_ptr<Trainer> trainer(const Config& c, uint64_t init_seed) const {
    configure_threads(c.run.threads);
    Loaders loaders = make_loaders(c, torch::kCPU);
    torch::manual_seed(init_seed);
    return make_trainer(c, models::create_model(c.model, {1, 10}), loaders.train, loaders.test, torch::kCPU);
  }

  testing::TempDir data_, runs_;
};

// Ten steps on one batch: the loss falls in each precision, channels-last, with the parameters in
// the precision's dtype and the 4-D ones in channels-last memory.
TEST_P(MobileFamilies, EveryPrecisionWithChannelsLastTrainsAndTheLossFalls) {
  for (const char* precision : {"fp32", "bf16-mixed", "bf16-true"}) {
    SCOPED_TRACE(precision);
    Config c = config();
    c.train.precision = parse_precision(precision);
    c.train.channels_last = true;
    c.optimizer.lr = 0.02;
    auto t = trainer(c, 1);
    for (const auto& p : t->module().parameters()) {
      EXPECT_EQ(p.scalar_type(), std::string(precision) == "bf16-true" ? torch::kBFloat16 : torch::kFloat32);
      if (p.dim() == 4) EXPECT_TRUE(p.is_contiguous(torch::MemoryFormat::ChannelsLast));
    }
    auto loader = make_loader(c, torch::kCPU, "train");
    loader->start_epoch(0);
    const data::Batch batch = *loader->next();
    std::vector<double> losses;
    for (int i = 0; i < 10; ++i) losses.push_back(t->train_step(batch).item<double>());
    for (double l : losses) ASSERT_TRUE(std::isfinite(l)) << fmt::format("{}", fmt::join(losses, ", "));
    const double first = (losses[0] + losses[1]) / 2, last = (losses[8] + losses[9]) / 2;
    EXPECT_LT(last, 0.7 * first) << "the loss did not fall: " << fmt::format("{}", fmt::join(losses, ", "));
  }
}

std::vector<torch::Tensor> weights(Trainer& t) {
  std::vector<torch::Tensor> out;
  for (const auto& p : t.module().parameters()) out.push_back(p.detach().clone());
  for (const auto& b : t.module().buffers()) out.push_back(b.detach().clone());
  return out;
}

struct StopAtStep : Callback {
  explicit StopAtStep(int64_t s) : step(s) {}
  void on_train_step_end(Trainer& t, const StepInfo& info) override {
    if (info.step == step) t.request_stop();
  }
  int64_t step;
};

// Two epochs straight, against stopping after step 8 (epoch 2, batch 2), checkpointing and going on
// in a fresh Trainer whose model starts from other weights: the same weights and statistics.
TEST_P(MobileFamilies, StoppedMidEpochResumesExactly) {
  const Config c = config();
  auto straight = trainer(c, 1);
  straight->fit();
  const auto expected = weights(*straight);

  auto first = trainer(c, 1);
  first->add_callback(std::make_shared<StopAtStep>(8));
  EXPECT_TRUE(first->fit().interrupted);
  EXPECT_EQ(first->state().batch_in_epoch, 2);
  first->save_checkpoint(runs_ / "mid.pt");

  auto second = trainer(c, 999);
  second->load_checkpoint(runs_ / "mid.pt");
  EXPECT_FALSE(second->fit().interrupted);
  EXPECT_EQ(second->state().step, straight->state().step);
  const auto got = weights(*second);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(torch::allclose(got[i], expected[i], 1e-5, 1e-6)) << "tensor " << i;
  }
}

// A one-epoch run through run_training, then `trainer export` of its checkpoint: TorchScript whose
// logits equal the checkpoint's model's, and a state dict with torchvision's names.
TEST_P(MobileFamilies, OneEpochRunExportsTorchScriptAndAStateDict) {
  TrainRequest request;
  request.config = config();
  request.config.train.epochs = 1;
  const TrainOutcome out = run_training(request);
  EXPECT_EQ(out.state.epoch, 1);
  EXPECT_EQ(out.final_test.samples, 64);
  EXPECT_TRUE(std::isfinite(out.final_test.loss));
  const fs::path checkpoint = out.run_dir / "checkpoints" / "last.pt";
  ASSERT_TRUE(fs::is_regular_file(checkpoint));

  ExportRequest e;
  e.checkpoint = checkpoint;
  e.format = "torchscript";
  e.output = runs_ / "model.pt";
  export_checkpoint(e);
  torch::jit::Module loaded = torch::jit::load(e.output.string());
  loaded.eval();

  torch::nn::AnyModule model = make_model(request.config, 1);
  load_checkpoint(checkpoint, *model.ptr(), nullptr, torch::kCPU);
  model.ptr()->eval();
  torch::NoGradGuard no_grad;
  torch::manual_seed(4);
  const torch::Tensor x = torch::randn({3, 1, 16, 16});
  const torch::Tensor want = model.forward(x), got = loaded.forward({x}).toTensor();
  EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-5)) << (got - want).abs().max();

  e.format = "state_dict";
  e.output = runs_ / "weights.pt";
  export_checkpoint(e);
  const std::string bytes = testing::read_bytes(e.output);
  EXPECT_NE(bytes.find("features.0.0.weight"), std::string::npos);
  const bool mobilenet = std::string(GetParam()).rfind("mobilenet", 0) == 0;
  EXPECT_NE(bytes.find(mobilenet ? "classifier.3.weight" : "classifier.1.weight"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Types, MobileFamilies,
                         ::testing::Values("efficientnet_b0", "mobilenet_v3_small", "mobilenet_v3_large"));

}  // namespace
}  // namespace stoker
