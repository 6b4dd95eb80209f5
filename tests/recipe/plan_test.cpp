// The run plan (recipe/run_plan.h, recipe/resolve.h): every derived number resolved once from the
// config and the data, the Trainer built from it agreeing, and the cheap checks before any timing.
#include "recipe/resolve.h"

#include <gtest/gtest.h>

#include "recipe/factory.h"
#include "test_config.h"

namespace stoker {
namespace {

class PlanTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::write_synthetic_idx_dataset(data_.path(), 128, 64, 12); }
  Config config() const {
    Config c = testing::tiny_config(data_.path(), runs_.path());
    c.train.precision = Precision::kFp32;
    return c;
  }
  testing::TempDir data_, runs_;
};

TEST_F(PlanTest, HoldsTheDerivedNumbers) {
  Config c = config();
  c.train.effective_batch_size = 64;  // 2 batches of 32 per optimizer step
  c.optimizer.lr_reference_batch = 32;
  const RunPlan plan = resolve_plan(c);
  EXPECT_EQ(plan.device, torch::Device(torch::kCPU));
  EXPECT_EQ(plan.world_size, 1);
  EXPECT_EQ(plan.batches.shards, 1);
  EXPECT_EQ(plan.batches.accumulate_steps, 2);
  EXPECT_EQ(plan.batches.global_batch, 64);
  EXPECT_DOUBLE_EQ(plan.batches.lr, 0.05 * 64 / 32);
  EXPECT_EQ(plan.train_samples, 128);
  EXPECT_EQ(plan.batches_per_epoch, 4);
  EXPECT_EQ(plan.steps_per_epoch, 2);
  EXPECT_EQ(plan.input.channels, 1);
  EXPECT_EQ(plan.input.height, 12);
  EXPECT_FALSE(plan.cudnn_benchmark);  // the CPU
  EXPECT_EQ(plan.yaml, config_to_yaml(plan.config));
  EXPECT_EQ(plan.precision.precision, Precision::kFp32);
  // The Trainer built from it steps as the plan says, at the plan's learning rate after the warm-up.
  const TrainingSetup setup = make_training(plan, Distributed{nullptr, {}, plan.device});
  EXPECT_EQ(setup.trainer->steps_per_epoch(), plan.steps_per_epoch);
  EXPECT_EQ(setup.trainer->accumulate_steps(), plan.batches.accumulate_steps);
  EXPECT_DOUBLE_EQ(setup.trainer->lr_at(1), plan.batches.lr);  // warm-up 0.5 epoch = 1 step, then cosine
}

TEST_F(PlanTest, AutoIsDecidedAndTheYamlSaysWhat) {
  Config c = config();
  c.train.precision = Precision::kAuto;
  const RunPlan plan = resolve_plan(c);
  EXPECT_NE(plan.config.train.precision, Precision::kAuto);
  EXPECT_EQ(plan.precision.precision, plan.config.train.precision);
  EXPECT_CONTAINS(plan.precision.line, "train.precision: auto -> ");
  EXPECT_CONTAINS(plan.yaml, fmt::format("precision: {}", precision_name(plan.config.train.precision)));
}

// The cheap checks come before the precision trial: a batch the data can never fill is an error at
// once, naming the key and the fix.
TEST_F(PlanTest, ABatchTheDataCannotFillIsAnErrorBeforeAnyTiming) {
  Config c = config();
  c.train.precision = Precision::kAuto;
  c.data.batch_size = 60000;
  EXPECT_EQ(testing::error_of([&] { resolve_plan(c); }),
            "data.batch_size (60000) is more than the 128 training samples: with data.drop_last an epoch would have "
            "no batch; lower data.batch_size to at most 128, or set data.drop_last: false to train on one partial "
            "batch");
  c.data.drop_last = false;  // one partial batch of 128: the trial times that, not 60000
  const RunPlan plan = resolve_plan(c);
  EXPECT_EQ(plan.batches_per_epoch, 1);
  if (plan.precision.line.find("a training step at batch") != std::string::npos) {
    EXPECT_CONTAINS(plan.precision.line, "a training step at batch 128");
  }
}

TEST_F(PlanTest, BatchArithmeticThatDoesNotAddUpIsAnError) {
  Config c = config();
  c.train.effective_batch_size = 48;
  EXPECT_CONTAINS(testing::error_of([&] { resolve_plan(c); }),
                  "train.effective_batch_size (48) must be a multiple of data.batch_size x data.shard_count (32 x 1 = "
                  "32); use 32 or 64");
}

// An application's own source: its batches and shape make the plan.
TEST_F(PlanTest, APlanForAnApplicationsSource) {
  const Config c = config();
  const Loaders loaders = make_loaders(c, torch::kCPU);
  const RunPlan plan = plan_for_source(c, *loaders.train, torch::kCPU);
  EXPECT_EQ(plan.batches_per_epoch, 4);
  EXPECT_EQ(plan.steps_per_epoch, 4);
  EXPECT_EQ(plan.input.height, 12);
  EXPECT_EQ(plan.train_set, nullptr);
}

}  // namespace
}  // namespace stoker
