// SplitLoader: a split's batches outside a run are the run's (make_loaders), its state resumes at
// another world size with the same global batch, and a state of another data configuration is refused.
#include "recipe/split_loader.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/error_kinds.h"
#include "data/transform_options.h"
#include "recipe/loaders.h"
#include "test_config.h"

namespace stoker {
namespace {
using stoker::testing::TempDir;

class SplitLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override { stoker::testing::write_synthetic_idx_dataset(data_.path(), 96, 24, 12); }
  Config config(int64_t batch_size = 8) const {
    Config c = stoker::testing::tiny_config(data_.path(), runs_.path());
    c.data.batch_size = batch_size;
    c.data.train_transforms = {data::make_transform("random_crop"), data::make_transform("horizontal_flip")};
    c.data.train_transforms[0].as<data::RandomCropOptions>().size = 10;
    c.data.eval_transforms = {data::make_transform("center_crop")};
    c.data.eval_transforms[0].as<data::CenterCropOptions>().size = 10;
    c.data.batch_ops = stoker::testing::erasing_and_mixup();
    return c;
  }
  TempDir data_, runs_;
};

std::vector<data::Batch> epoch_of(SplitLoader& loader) {
  std::vector<data::Batch> out;
  loader.begin();
  while (auto b = loader.next()) out.push_back(std::move(*b));
  return out;
}

TEST_F(SplitLoaderTest, BatchesAreTheRunsForAnyWorkerCount) {
  Config c = config();
  Loaders run = make_loaders(c, torch::kCPU);
  std::shared_ptr<data::BatchSource> train = augment_training(c, run.train);
  train->start_epoch(1);
  for (int64_t workers : {0, 3}) {
    c.data.workers = workers;
    SplitLoader loader(c, SplitLoaderOptions());
    loader.set_epoch(1);
    const std::vector<data::Batch> mine = epoch_of(loader);
    ASSERT_EQ(static_cast<int64_t>(mine.size()), run.train->num_batches());
    if (workers == 0) {
      for (const data::Batch& b : mine) {
        const std::optional<data::Batch> theirs = train->next();
        ASSERT_TRUE(theirs.has_value());
        EXPECT_EQ(b.digest, theirs->digest);
        EXPECT_TRUE(torch::equal(b.input, theirs->input)) << "batch " << b.index;
        EXPECT_TRUE(torch::equal(b.target, theirs->target)) << "batch " << b.index;
      }
    }
    EXPECT_EQ(loader.state().epoch, 2);  // a whole epoch handed out: the state is the next one's start
    EXPECT_EQ(loader.state().batch, 0);
  }
}

TEST_F(SplitLoaderTest, StateResumesMidEpochAtAnotherWorldSize) {
  // Two ranks with batch 4 stop after 3 batches; one process with batch 8 resumes and gets the rest
  // of the epoch's global batches: rank 0's and rank 1's slices, one after the other.
  Config two = config(4);
  two.data.batch_ops.clear();  // mixup's draws are per rank: compare the samples themselves
  std::vector<std::vector<data::Batch>> ranks;
  std::vector<LoaderState> states;
  for (int64_t r = 0; r < 2; ++r) {
    SplitLoader loader(two, SplitLoaderOptions().set_rank(r).set_world_size(2));
    ranks.push_back(epoch_of(loader));
    SplitLoader stopped(two, SplitLoaderOptions().set_rank(r).set_world_size(2));
    stopped.begin();
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(stopped.next().has_value());
    states.push_back(stopped.state());
  }
  EXPECT_EQ(states[0].batch, 3);
  EXPECT_EQ(states[0].data_yaml, states[1].data_yaml);  // one state, the same on every rank
  EXPECT_EQ(states[0].batch, states[1].batch);
  Config one = config(8);
  one.data.batch_ops.clear();
  SplitLoader resumed(one, SplitLoaderOptions());
  resumed.load_state(states[0]);
  resumed.begin();
  int64_t k = 3;
  while (auto b = resumed.next()) {
    ASSERT_LT(k, static_cast<int64_t>(ranks[0].size()));
    EXPECT_EQ(b->index, k);
    EXPECT_EQ(b->digest, ranks[0][k].digest ^ ranks[1][k].digest);
    EXPECT_TRUE(torch::equal(b->input, torch::cat({ranks[0][k].input, ranks[1][k].input})));
    ++k;
  }
  EXPECT_EQ(k, static_cast<int64_t>(ranks[0].size()));
}

TEST_F(SplitLoaderTest, RefusesAStateOfOtherDataSayingWhatDiffers) {
  SplitLoader loader(config(), SplitLoaderOptions());
  const LoaderState state = loader.state();
  Config other = config();
  other.run.seed = 8;
  other.data.workers = 2;  // how, not what: not a difference
  SplitLoader seeded(other, SplitLoaderOptions());
  const std::string message = stoker::testing::error_of([&] { seeded.load_state(state); });
  EXPECT_NE(message.find("run.seed: 7 -> 8"), std::string::npos) << message;
  EXPECT_EQ(message.find("data.workers"), std::string::npos) << message;
  EXPECT_THROW(seeded.load_state(state), InvalidValueError);
  // Another global batch: the trainer's message, naming both.
  SplitLoader bigger(config(16), SplitLoaderOptions());
  EXPECT_NE(stoker::testing::error_of([&] { bigger.load_state(state); }).find("samples per optimizer step"),
            std::string::npos);
  SplitLoader test(config(), SplitLoaderOptions().set_split("test"));
  EXPECT_NE(stoker::testing::error_of([&] { test.load_state(state); }).find("the train split"), std::string::npos);
}

TEST_F(SplitLoaderTest, ClosedLoaderAndBadRanksAreErrors) {
  SplitLoader loader(config(), SplitLoaderOptions());
  loader.begin();
  ASSERT_TRUE(loader.next().has_value());
  loader.close();
  loader.close();  // again: nothing
  EXPECT_NE(stoker::testing::error_of([&] { loader.begin(); }).find("closed"), std::string::npos);
  EXPECT_THROW(SplitLoader(config(), SplitLoaderOptions().set_rank(2).set_world_size(2)), InvalidValueError);
  Config missing = config();
  missing.data.root = data_.path().string() + "/nowhere";
  EXPECT_THROW(SplitLoader(missing, SplitLoaderOptions()), NotFoundError);
}

}  // namespace
}  // namespace stoker
