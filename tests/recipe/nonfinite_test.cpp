// train.on_nonfinite: the inf/NaN flag, and what the Trainer does when a step's loss becomes NaN
// (stop: the first such step named, no checkpoint after it; skip: the step changes nothing, counted,
// and too many in a row end the run).
#include "trainer/nonfinite.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <set>
#include <utility>

#include "models/registry.h"
#include "test_config.h"
#include "trainer/callbacks.h"
#include "recipe/device.h"
#include "recipe/factory.h"
#include "recipe/run.h"

namespace stoker {
namespace {
namespace fs = std::filesystem;
using stoker::testing::TempDir;

TEST(NonfiniteFlag, FindsInfAndNanInAnyTensor) {
  const torch::Device cpu(torch::kCPU);
  const torch::Tensor a = torch::ones({3, 4}), b = torch::randn({7});
  EXPECT_EQ(nonfinite_flag({a, b}, cpu).item<float>(), 0.0f);
  EXPECT_EQ(nonfinite_flag({}, cpu).item<float>(), 0.0f);
  EXPECT_EQ(nonfinite_flag({torch::Tensor(), a}, cpu).item<float>(), 0.0f);
  torch::Tensor with_nan = b.clone(), with_inf = a.clone();
  with_nan[3] = NAN;
  with_inf[1][2] = -INFINITY;
  EXPECT_EQ(nonfinite_flag({a, with_nan}, cpu).item<float>(), 1.0f);
  EXPECT_EQ(nonfinite_flag({with_inf, b}, cpu).item<float>(), 1.0f);
  EXPECT_EQ(nonfinite_flag({a.to(torch::kBFloat16), with_nan.to(torch::kBFloat16)}, cpu).item<float>(), 1.0f);
}

// The batches of `inner`, with NaN inputs in the batches listed as (epoch, index).
class PoisonedSource : public data::BatchSource {
 public:
  PoisonedSource(std::shared_ptr<data::BatchSource> inner, std::set<std::pair<int64_t, int64_t>> poisoned)
      : inner_(std::move(inner)), poisoned_(std::move(poisoned)) {}
  int64_t num_batches() const override { return inner_->num_batches(); }
  int64_t num_samples() const override { return inner_->num_samples(); }
  int64_t channels() const override { return inner_->channels(); }
  int64_t out_height() const override { return inner_->out_height(); }
  int64_t out_width() const override { return inner_->out_width(); }
  void start_epoch(int64_t epoch, int64_t first_batch) override {
    epoch_ = epoch;
    inner_->start_epoch(epoch, first_batch);
  }
  std::optional<data::Batch> next() override {
    std::optional<data::Batch> b = inner_->next();
    if (b && poisoned_.count({epoch_, b->index}) > 0) b->input = torch::full_like(b->input, NAN);
    return b;
  }

 private:
  std::shared_ptr<data::BatchSource> inner_;
  std::set<std::pair<int64_t, int64_t>> poisoned_;
  int64_t epoch_ = 0;
};

class NonfiniteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    stoker::testing::write_synthetic_idx_dataset(data_.path(), 640, 128, 12);  // 20 batches of 32
    config_ = stoker::testing::tiny_config(data_.path(), runs_.path());
    config_.train.epochs = 1;
    config_.train.log_every_steps = 50;  // the flags are read at the epoch's end or before a checkpoint
  }
  std::unique_ptr<Trainer> trainer(std::set<std::pair<int64_t, int64_t>> poisoned) {
    configure_threads(1);
    Loaders loaders = make_loaders(config_, torch::kCPU);
    torch::manual_seed(3);
    auto train = std::make_shared<PoisonedSource>(loaders.train, std::move(poisoned));
    return make_trainer(config_, models::create_model(config_.model, {}), train, loaders.test, torch::kCPU);
  }
  TempDir data_, runs_;
  Config config_;
};

std::vector<torch::Tensor> state_of(Trainer& t) {
  std::vector<torch::Tensor> out;
  for (const auto& p : t.module().parameters()) out.push_back(p.detach().clone());
  for (const auto& b : t.module().buffers()) out.push_back(b.detach().clone());
  return out;
}

bool all_finite(const std::vector<torch::Tensor>& tensors) {
  for (const auto& t : tensors) {
    if (t.is_floating_point() && !torch::isfinite(t).all().item<bool>()) return false;
  }
  return true;
}

TEST_F(NonfiniteTest, StopNamesTheFirstNonfiniteStepAndWritesNoCheckpointAfterIt) {
  auto t = trainer({{0, 6}});  // the 7th batch: step 7
  CheckpointOptions every4;
  every4.every_steps = 4;
  t->add_callback(std::make_shared<CheckpointCallback>(runs_ / "checkpoints", every4));
  try {
    t->fit();
    FAIL() << "fit() went on after a NaN loss";
  } catch (const NonfiniteError& e) {
    EXPECT_EQ(e.what_became_nonfinite(), "the loss");
    EXPECT_EQ(e.place().step, 7);
    EXPECT_EQ(e.place().batch, 6);
    EXPECT_DOUBLE_EQ(e.place().lr, t->lr_at(6));
    EXPECT_CONTAINS(std::string(e.what()), "the loss became inf or NaN at step 7 (epoch 1, batch 7) with learning rate");
  }
  // The checkpoint of step 4 stayed; the one of step 8 was refused.
  auto fresh = trainer({});
  fresh->load_checkpoint(runs_ / "checkpoints/last.pt");
  EXPECT_EQ(fresh->state().step, 4);
  EXPECT_TRUE(all_finite(state_of(*fresh)));
}

TEST_F(NonfiniteTest, ACheckpointOfNonfiniteWeightsIsRefused) {
  auto t = trainer({});
  {
    torch::NoGradGuard no_grad;
    t->module().parameters()[0].view(-1)[0] = INFINITY;
  }
  EXPECT_THROW(t->save_checkpoint(runs_ / "w.pt"), NonfiniteError);
  EXPECT_FALSE(fs::exists(runs_ / "w.pt"));
}

// Records the weights and buffers after given steps.
struct RecordAt : Callback {
  explicit RecordAt(std::set<int64_t> s) : steps(std::move(s)) {}
  void on_train_step_end(Trainer& t, const StepInfo& info) override {
    if (steps.count(info.step) > 0) recorded[info.step] = state_of(t);
  }
  std::set<int64_t> steps;
  std::map<int64_t, std::vector<torch::Tensor>> recorded;
};

TEST_F(NonfiniteTest, SkipLeavesTheWeightsAndBuffersAsTheyWereAndCountsTheSkips) {
  config_.train.on_nonfinite = OnNonfinite::kSkip;
  auto t = trainer({{0, 3}, {0, 4}, {0, 10}});  // steps 4, 5 and 11
  auto record = std::make_shared<RecordAt>(std::set<int64_t>{3, 5, 6});
  t->add_callback(record);
  const FitResult r = t->fit();
  ASSERT_EQ(r.epochs.size(), 1u);
  EXPECT_EQ(r.epochs[0].nonfinite_skips, 3);
  EXPECT_EQ(t->state().step, 20);
  EXPECT_TRUE(std::isfinite(r.epochs[0].train_loss));
  EXPECT_TRUE(std::isfinite(r.epochs[0].test.loss));
  EXPECT_TRUE(all_finite(state_of(*t)));
  const auto& at3 = record->recorded.at(3);
  const auto& at5 = record->recorded.at(5);
  const auto& at6 = record->recorded.at(6);
  for (size_t i = 0; i < at3.size(); ++i) {
    EXPECT_TRUE(torch::equal(at3[i], at5[i])) << "tensor " << i << " changed in a skipped step";
  }
  bool moved = false;
  for (size_t i = 0; i < at5.size(); ++i) moved = moved || !torch::equal(at5[i], at6[i]);
  EXPECT_TRUE(moved) << "the step after the skipped ones changed nothing";
}

TEST_F(NonfiniteTest, SkipGivesUpAfterMaxSkipsInARow) {
  config_.train.on_nonfinite = OnNonfinite::kSkip;
  config_.train.max_nonfinite_skips = 3;
  std::set<std::pair<int64_t, int64_t>> poisoned;
  for (int64_t b = 5; b < 20; ++b) poisoned.insert({0, b});
  auto t = trainer(poisoned);
  try {
    t->fit();
    FAIL() << "fit() skipped on and on";
  } catch (const NonfiniteError& e) {
    EXPECT_EQ(e.skips_in_a_row(), 3);
    EXPECT_EQ(e.place().step, 8);
    EXPECT_CONTAINS(std::string(e.what()), "train.max_nonfinite_skips = 3");
  }
}

TEST_F(NonfiniteTest, TheRunSaysWhichCheckpointToResumeFromWithALowerRate) {
  // Diverges in the second epoch: last.pt of the first epoch is the last good checkpoint.
  TrainRequest request;
  request.config = config_;
  const TrainOutcome first = run_training(request);  // one clean epoch
  request.config.train.epochs = 2;
  request.allow_config_change = true;
  request.resume = first.run_dir;
  request.config.optimizer.lr = 1e30;  // the weights overflow within a few steps
  try {
    run_training(request);
    FAIL() << "the run went on with lr 1e30";
  } catch (const TrainingDiverged& e) {
    ASSERT_TRUE(e.last_good.has_value());
    EXPECT_EQ(*e.last_good, first.run_dir / "checkpoints/last.pt");
    EXPECT_EQ(e.last_good_step, 20);
    EXPECT_DOUBLE_EQ(e.lower_lr, 1e29);
    EXPECT_CONTAINS(std::string(e.what()), "training diverged: ");
  }
  auto fresh = trainer({});
  fresh->load_checkpoint(first.run_dir / "checkpoints/last.pt");
  EXPECT_EQ(fresh->state().step, 20);
  EXPECT_TRUE(all_finite(state_of(*fresh)));
}

}  // namespace
}  // namespace stoker
