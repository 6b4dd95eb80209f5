// Training with the batch operations on (data.batch_ops: mixup, random_erasing) and RandAugment in the
// workers: the Trainer steps on soft targets, and a run stopped mid-epoch and resumed from its
// checkpoint sees the same batches and losses as one that ran straight through.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>

#include "data/batch_ops.h"
#include "data/transform_options.h"
#include "models/registry.h"
#include "recipe/device.h"
#include "recipe/factory.h"
#include "recipe/run.h"
#include "test_config.h"

namespace stoker {
namespace {
namespace fs = std::filesystem;
using stoker::testing::TempDir;

class BatchAugmentTest : public ::testing::Test {
 protected:
  void SetUp() override { stoker::testing::write_synthetic_idx_dataset(data_.path(), 320, 64, 12); }
  Config config() const {
    Config c = stoker::testing::tiny_config(data_.path(), runs_.path());
    c.train.epochs = 2;
    c.train.label_smoothing = 0.1;
    c.data.batch_ops = stoker::testing::erasing_and_mixup();
    c.data.train_transforms = {data::make_transform("rand_augment")};
    c.data.train_transforms[0].as<data::RandAugmentOptions>().magnitude_std = 0.5;
    return c;
  }
  TempDir data_, runs_;
};

// Every step's loss by optimizer step.
struct LossLog : Callback {
  void on_train_step_end(Trainer&, const StepInfo& info) override { losses[info.step] = info.loss.item<double>(); }
  std::map<int64_t, double> losses;
};

struct StopAt : Callback {
  explicit StopAt(int64_t s) : step(s) {}
  void on_train_step_end(Trainer& t, const StepInfo& info) override {
    if (info.step == step) t.request_stop();
  }
  int64_t step;
};

std::unique_ptr<Trainer> trainer_for(const Config& config, uint64_t init_seed) {
  configure_threads(config.run.threads);
  Loaders loaders = make_loaders(config, torch::kCPU);
  torch::manual_seed(init_seed);
  return make_trainer(config, models::create_model(config.model, {}), augment_training(config, loaders.train),
                      loaders.test, torch::kCPU);
}

TEST_F(BatchAugmentTest, ResumeMidEpochGivesTheSameLossesWithMixupErasingAndRandAugment) {
  const Config c = config();
  auto straight = trainer_for(c, 1);
  auto all = std::make_shared<LossLog>();
  straight->add_callback(all);
  straight->fit();
  ASSERT_EQ(all->losses.size(), 20u);  // 2 epochs of 320 / 32 batches

  auto first = trainer_for(c, 1);
  first->add_callback(std::make_shared<StopAt>(13));
  ASSERT_TRUE(first->fit().interrupted);
  first->save_checkpoint(runs_ / "mid.pt");
  auto second = trainer_for(c, 999);
  second->load_checkpoint(runs_ / "mid.pt");
  auto rest = std::make_shared<LossLog>();
  second->add_callback(rest);
  second->fit();
  ASSERT_EQ(rest->losses.size(), 7u);
  for (const auto& [step, loss] : rest->losses) {
    EXPECT_NEAR(loss, all->losses.at(step), 1e-5 * std::abs(loss)) << "step " << step;
  }
}

TEST_F(BatchAugmentTest, MixedTargetsAreSoftAndTheLossIsAgainstThem) {
  Config c = config();
  Loaders loaders = make_loaders(c, torch::kCPU);
  auto source = augment_training(c, loaders.train);
  source->start_epoch(0);
  const std::optional<data::Batch> b = source->next();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->target.sizes(), (torch::IntArrayRef{32, 10}));
  EXPECT_TRUE(torch::allclose(b->target.sum(1), torch::ones({32})));
  // Smoothing 0.1 over 10 classes: no target is below the off value 0.01.
  EXPECT_GE(b->target.min().item<double>(), 0.01 - 1e-7);
  // Without any batch operation the loader itself is the source.
  c.data.batch_ops.clear();
  EXPECT_EQ(augment_training(c, loaders.train), loaders.train);
}

// The operations come after the loader and draw from (seed, rank, epoch, batch/position): the same
// batches for any worker count; another rank draws otherwise.
TEST_F(BatchAugmentTest, SameBatchesForAnyWorkerCountAndOtherDrawsOnAnotherRank) {
  auto batches = [&](int64_t workers, int64_t rank) {
    Config c = config();
    c.data.workers = workers;
    Loaders loaders = make_loaders(c, torch::kCPU);
    auto source = augment_training(c, loaders.train, rank);
    source->start_epoch(1, 2);
    std::vector<data::Batch> out;
    for (int i = 0; i < 3; ++i) out.push_back(*source->next());
    return out;
  };
  const std::vector<data::Batch> inline_built = batches(0, 0), threaded = batches(2, 0), other_rank = batches(0, 1);
  for (size_t i = 0; i < inline_built.size(); ++i) {
    EXPECT_EQ(inline_built[i].index, static_cast<int64_t>(i) + 2);
    EXPECT_TRUE(torch::equal(inline_built[i].input, threaded[i].input)) << i;
    EXPECT_TRUE(torch::equal(inline_built[i].target, threaded[i].target)) << i;
    EXPECT_FALSE(torch::equal(inline_built[i].target, other_rank[i].target)) << i;
  }
}

// The modern recipe runs as shipped (one epoch on a small synthetic IDX set in its place), with its
// batch operations, stochastic depth and soft targets all on.
TEST(ModernRecipe, OneEpochSmokeRun) {
  TempDir data, runs;
  stoker::testing::write_synthetic_idx_dataset(data.path(), 256, 64, 28);
  const std::string recipe = std::string(STOKER_SOURCE_DIR) + "/configs/fashion_mnist_modern.yaml";
  TrainRequest request;
  request.config = load_config(recipe, {"data.root=" + data.path().string(), "run.dir=" + runs.path().string(),
                                        "run.device=cpu", "run.threads=1", "train.epochs=1"});
  const std::vector<TypedOptions>& ops = request.config.data.batch_ops;
  ASSERT_EQ(ops.size(), 2u);
  ASSERT_EQ(ops[0].type(), "random_erasing");
  ASSERT_EQ(ops[1].type(), "mixup");
  const TrainOutcome out = run_training(request);
  EXPECT_EQ(out.state.epoch, 1);
  EXPECT_EQ(out.state.step, 2);
  EXPECT_EQ(out.final_test.samples, 64);
  const std::string log = stoker::testing::read_bytes(out.run_dir / "train.log");
  EXPECT_NE(log.find("data.batch_ops[1] (mixup): "), std::string::npos);
  EXPECT_NE(log.find("training top-1 is against each sample's dominant label"), std::string::npos);
  EXPECT_NE(log.find("data.batch_ops[0] (random_erasing): "), std::string::npos);
}

}  // namespace
}  // namespace stoker
