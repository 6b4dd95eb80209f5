// data.resolution_schedule and data.eval_size in whole runs (recipe/factory.h): the training crops
// change size at epoch boundaries and evaluation keeps its own; a run stopped mid-epoch after a
// change and resumed from its checkpoint trains on exactly the losses of the uninterrupted run, and
// the losses do not depend on the loader's workers. The config's checks name the key at fault.
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <map>
#include <string>

#include "models/flops.h"
#include "recipe/factory.h"
#include "recipe/run_logging.h"
#include "test_config.h"

namespace stoker {
namespace {

// 96 synthetic 16x16 RGB samples in batches of 16: 6 steps an epoch; training crops of 8, 12, 16
// pixels in epochs 0, 1, 2 (8 -> 16 over epochs 0..2 in multiples of 4); evaluation at 12.
Config resizing_recipe(int64_t workers) {
  const std::string yaml = fmt::format(R"(
run: {{name: resize, seed: 5, device: cpu, threads: 1}}
data:
  type: synthetic
  num_classes: 4
  batch_size: 16
  eval_batch_size: 32
  workers: {}
  synthetic: {{train_samples: 96, test_samples: 32, height: 16, width: 16, channels: 3}}
  train_transforms: [{{type: random_resized_crop, size: 16}}, {{type: horizontal_flip}}]
  eval_transforms: [{{type: resize, size: 16}}, {{type: center_crop, size: 14}}]
  eval_size: 12
  resolution_schedule: {{start_size: 8, end_size: 16, start_epoch: 0, end_epoch: 2, step: 4}}
  mean: [0.5, 0.5, 0.5]
  std: [0.25, 0.25, 0.25]
model: {{type: compact_resnet, widths: [8, 16], blocks: [1, 1], dropout: 0.1}}
optimizer: {{type: sgd, lr: 0.05}}
train: {{epochs: 3, log_every_steps: 2}}
)",
                                       workers);
  return parse_config(yaml, "resize.yaml");
}

// Records each step's loss, and each epoch's training size; stops after step `stop_after` (0: never).
class Recorder : public Callback {
 public:
  Recorder(std::shared_ptr<data::BatchSource> source, int64_t stop_after)
      : source_(std::move(source)), stop_after_(stop_after) {}
  void on_epoch_start(Trainer&, int64_t epoch) override { sizes[epoch] = source_->out_height(); }
  void on_train_step_end(Trainer& trainer, const StepInfo& s) override {
    losses[s.step] = s.loss.item<double>();
    if (s.step == stop_after_) trainer.request_stop();
  }
  std::map<int64_t, double> losses;
  std::map<int64_t, int64_t> sizes;

 private:
  std::shared_ptr<data::BatchSource> source_;
  int64_t stop_after_;
};

struct Trained {
  std::map<int64_t, double> losses;
  std::map<int64_t, int64_t> sizes;
  EvalResult test;
};

// Trains `config` (from `checkpoint` when given), stopping after step `stop_after`; saves to `save`.
Trained train(const Config& config, int64_t stop_after = 0, const std::filesystem::path& checkpoint = {},
              const std::filesystem::path& save = {}) {
  TrainingSetup setup = make_training(config);
  EXPECT_EQ(setup.loaders.test->out_height(), 12);
  EXPECT_EQ(setup.loaders.train, nullptr);  // the RetunableLoader holds it alone
  auto recorder = std::make_shared<Recorder>(setup.train_source, stop_after);
  setup.trainer->add_callback(recorder);
  if (!checkpoint.empty()) setup.trainer->load_checkpoint(checkpoint);
  const FitResult fit = setup.trainer->fit();
  if (!save.empty()) setup.trainer->save_checkpoint(save);
  return {recorder->losses, recorder->sizes, fit.epochs.empty() ? EvalResult{} : fit.epochs.back().test};
}

TEST(ResolutionRun, ResumedMidEpochAfterAChangeItTrainsExactlyAsTheUninterruptedRun) {
  const Trained whole = train(resizing_recipe(0));
  ASSERT_EQ(whole.losses.size(), 18u);
  EXPECT_EQ(whole.sizes, (std::map<int64_t, int64_t>{{0, 8}, {1, 12}, {2, 16}}));
  EXPECT_EQ(whole.test.samples, 32);

  // Stopped after step 9 (batch 3 of epoch 1, at 12 pixels), resumed from its checkpoint.
  testing::TempDir dir;
  const std::filesystem::path checkpoint = dir.path() / "stopped.pt";
  const Trained first = train(resizing_recipe(0), 9, {}, checkpoint);
  ASSERT_EQ(first.losses.size(), 9u);
  const Trained rest = train(resizing_recipe(0), 0, checkpoint);
  ASSERT_EQ(rest.losses.size(), 9u);
  EXPECT_EQ(rest.sizes, (std::map<int64_t, int64_t>{{1, 12}, {2, 16}}));
  std::map<int64_t, double> joined = first.losses;
  joined.insert(rest.losses.begin(), rest.losses.end());
  EXPECT_EQ(joined, whole.losses);
  EXPECT_EQ(rest.test.loss, whole.test.loss);

  // Two workers build the same batches.
  EXPECT_EQ(train(resizing_recipe(2)).losses, whole.losses);
}

// The metrics' FLOPs per sample follow the epoch's size: the model's count at 8, 12 and 16 pixels.
TEST(ResolutionRun, TrainingFlopsPerSampleAreCountedAtEachEpochsSize) {
  const Config config = resizing_recipe(0);
  const std::function<double(int64_t)> by_epoch = training_flops_by_epoch(config, 3);
  ASSERT_TRUE(by_epoch);
  torch::nn::AnyModule model = make_model(config, {3});
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    const int64_t size = 8 + 4 * epoch;
    EXPECT_EQ(by_epoch(epoch), 3 * models::count_forward_flops(model, {3, size, size}).flops()) << "epoch " << epoch;
  }
  EXPECT_GT(by_epoch(2), 3.5 * by_epoch(0));  // (16 / 8)^2 = 4 for the convolutions
  Config fixed = config;
  fixed.data.resolution_schedule = {};
  EXPECT_FALSE(training_flops_by_epoch(fixed, 3));
}

TEST(ResolutionRun, BadSizeKeysNameTheKeyAndSayWhatToDo) {
  const std::string base = R"(
data:
  type: synthetic
  synthetic: {train_samples: 8, test_samples: 8, height: 8, width: 8, channels: 1}
)";
  EXPECT_CONTAINS(testing::error_of([&] {
                    parse_config(base + "  resolution_schedule: {start_size: 8, end_size: 16, end_epoch: 2, step: 4}\n",
                                 "a.yaml");
                  }),
                  "data.resolution_schedule sets the size of the training crops, but data.train_transforms has no");
  EXPECT_CONTAINS(testing::error_of([&] {
                    parse_config(base + "  resolution_schedule: {end_size: 16}\n", "b.yaml");
                  }),
                  "data.resolution_schedule has an end_size but no start_size");
  EXPECT_CONTAINS(testing::error_of([&] {
                    parse_config(base + "  train_transforms: [{type: random_crop, size: 8}]\n"
                                        "  resolution_schedule: {start_size: 8, end_size: 16, start_epoch: 3, "
                                        "end_epoch: 2, step: 4}\n",
                                 "c.yaml");
                  }),
                  "data.resolution_schedule: start_epoch (3) must be at least 0 and end_epoch (2) at least "
                  "start_epoch");
  EXPECT_CONTAINS(testing::error_of([&] { parse_config(base + "  eval_size: 8\n", "d.yaml"); }),
                  "data.eval_size (8) sets the size of the evaluation crops, but data.eval_transforms has no");
}

}  // namespace
}  // namespace stoker
