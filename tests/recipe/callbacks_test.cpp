// Early stopping and the best checkpoint by a named metric.
#include "trainer/callbacks.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "test_config.h"
#include "recipe/device.h"
#include "recipe/factory.h"
#include "recipe/run.h"

namespace stoker {
namespace {
namespace fs = std::filesystem;
using stoker::testing::TempDir;

class CallbacksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    stoker::testing::write_synthetic_idx_dataset(data_.path(), 320, 100, 12);
    config_ = stoker::testing::tiny_config(data_.path(), runs_.path());
  }
  std::unique_ptr<Trainer> make_trainer() {
    configure_threads(config_.run.threads);
    Loaders loaders = make_loaders(config_, torch::kCPU);
    return stoker::make_trainer(config_, make_model(config_, {loaders.in_channels}), loaders.train, loaders.test,
                                torch::kCPU);
  }
  static EpochResult epoch(int64_t index, double top1, double loss) {
    EpochResult r;
    r.epoch = index;
    r.test = {loss, top1, 1.0, 100};
    return r;
  }
  TempDir data_, runs_;
  Config config_;
};

TEST_F(CallbacksTest, EarlyStoppingAfterPatienceEpochsWithoutImprovement) {
  config_.train.epochs = 20;
  config_.train.early_stopping = {"test_top1", 3, 0.01};
  auto trainer = make_trainer();
  EarlyStoppingCallback cb(config_.train.early_stopping);
  // Improvements must exceed min_delta: 0.605 and 0.61 do not beat 0.6 by more than 0.01.
  const std::vector<double> top1 = {0.5, 0.6, 0.605, 0.61, 0.59};
  for (size_t e = 0; e < top1.size(); ++e) {
    EXPECT_FALSE(trainer->finish_requested()) << "stopped before epoch " << e;
    cb.on_validation_end(*trainer, epoch(static_cast<int64_t>(e), top1[e], 1.0));
  }
  EXPECT_TRUE(trainer->finish_requested()) << "3 epochs without improvement";
  EXPECT_EQ(trainer->state().early_stop_best, 0.6);
  EXPECT_EQ(trainer->state().early_stop_epoch, 1);

  // A loss improves downwards.
  config_.train.early_stopping = {"test_loss", 2, 0.0};
  trainer = make_trainer();
  EarlyStoppingCallback by_loss(config_.train.early_stopping);
  const std::vector<double> loss = {1.0, 0.9, 0.95, 0.85, 0.9, 0.86};
  for (size_t e = 0; e < loss.size(); ++e) {
    EXPECT_FALSE(trainer->finish_requested()) << "stopped before epoch " << e;
    by_loss.on_validation_end(*trainer, epoch(static_cast<int64_t>(e), 0.5, loss[e]));
  }
  EXPECT_TRUE(trainer->finish_requested());
  EXPECT_EQ(trainer->state().early_stop_epoch, 3);
}

TEST_F(CallbacksTest, EarlyStoppingEndsTheRunNormallyWithItsLastCheckpoint) {
  TrainRequest request;
  request.config = config_;
  request.config.train.epochs = 10;
  // Nothing beats the first epoch by a loss of 100: the run stops after epoch 1 + 2.
  request.config.train.early_stopping = {"test_loss", 2, 100.0};
  const TrainOutcome out = run_training(request);
  EXPECT_TRUE(out.fit.stopped_early);
  EXPECT_FALSE(out.fit.interrupted);
  EXPECT_EQ(out.fit.epochs.size(), 3u);
  EXPECT_EQ(out.state.epoch, 3);
  EXPECT_EQ(out.final_test.samples, 100);
  const fs::path last = out.run_dir / "checkpoints/last.pt";
  ASSERT_TRUE(fs::is_regular_file(last));
  auto model = make_model(config_, {1});
  const CheckpointContent saved = load_checkpoint(last, *model.ptr(), nullptr, torch::kCPU);
  EXPECT_EQ(saved.state.epoch, 3);
  EXPECT_EQ(saved.state.early_stop_epoch, 0);
  EXPECT_CONTAINS(stoker::testing::read_bytes(out.run_dir / "train.log"),
                  "early stopping after epoch 3: test_loss has not improved by more than 100 for 2 epoch(s)");
}

TEST_F(CallbacksTest, BestCheckpointFollowsTheNamedMetric) {
  config_.train.ema_decay = 0.9;
  config_.checkpoint.best_metric = "ema_test_loss";
  auto trainer = make_trainer();
  CheckpointCallback cb(runs_ / "checkpoints", config_.checkpoint);
  const std::vector<double> ema_loss = {1.0, 0.8, 0.9};
  for (size_t e = 0; e < ema_loss.size(); ++e) {
    EpochResult r = epoch(static_cast<int64_t>(e), 0.5 + 0.1 * e, 1.0 - 0.1 * e);
    r.ema_test = {ema_loss[e], 0.5, 0.9, 100};
    cb.on_epoch_end(*trainer, r);
  }
  EXPECT_EQ(trainer->state().best_epoch, 1);
  EXPECT_EQ(trainer->state().best_metric, 0.8);
  EXPECT_TRUE(fs::is_regular_file(runs_ / "checkpoints/best.pt"));

  config_.checkpoint.best_metric = "test_top5";
  trainer = make_trainer();
  CheckpointCallback top5(runs_ / "checkpoints5", config_.checkpoint);
  const std::vector<double> top5_values = {0.9, 0.97, 0.95};
  for (size_t e = 0; e < top5_values.size(); ++e) {
    EpochResult r = epoch(static_cast<int64_t>(e), 0.5, 1.0);
    r.test.top5 = top5_values[e];
    top5.on_epoch_end(*trainer, r);
  }
  EXPECT_EQ(trainer->state().best_epoch, 1);
  EXPECT_EQ(trainer->state().best_metric, 0.97);
}

}  // namespace
}  // namespace stoker
