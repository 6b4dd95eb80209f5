// The doctor and the run start from the same plan (recipe/resolve.h): for every shipped recipe (its
// data replaced by generated samples of its channels, the precision named so that no trial's timing
// differs between the two), trainer doctor's bench and run_training's resolution agree on every
// derived number and on the resolved YAML.
#include <gtest/gtest.h>

#include <filesystem>

#include "doctor/detail.h"
#include "recipe/resolve.h"
#include "test_config.h"
#include "test_util.h"

namespace stoker {
namespace {
namespace fs = std::filesystem;

std::string summary(const RunPlan& p) {
  return fmt::format("device {} rank {}/{} shards {} accumulate {} global {} lr {} samples {} batches {} steps {} "
                     "input {}x{}x{} cudnn {} precision {}\n{}",
                     p.device.str(), p.rank, p.world_size, p.batches.shards, p.batches.accumulate_steps,
                     p.batches.global_batch, p.batches.lr, p.train_samples, p.batches_per_epoch, p.steps_per_epoch,
                     p.input.channels, p.input.height, p.input.width, p.cudnn_benchmark,
                     precision_name(p.precision.precision), p.yaml);
}

TEST(SamePlan, TheDoctorAndTheRunResolveEveryShippedRecipeAlike) {
  int recipes = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(STOKER_SOURCE_DIR) / "configs")) {
    if (entry.path().extension() != ".yaml" || testing::skipped_recipe(entry.path())) continue;
    const Config recipe = load_config(entry.path());
    const int64_t channels = static_cast<int64_t>(recipe.data.mean.size());
    const Config c = load_config(
        entry.path(), {"data.type=synthetic", "data.synthetic.train_samples=512", "data.synthetic.test_samples=64",
                       fmt::format("data.synthetic.channels={}", channels), "data.synthetic.height=40",
                       "data.synthetic.width=40", "data.cache=none", "data.workers=0", "data.autotune=off",
                       "data.batch_size=16", "train.precision=fp32", "run.device=cpu"});
    const RunPlan run = resolve_plan(c);
    const doctor::Bench bench = doctor::make_bench(c);
    EXPECT_EQ(summary(run), summary(bench.plan)) << entry.path();
    EXPECT_GT(run.steps_per_epoch, 0) << entry.path();
    ++recipes;
  }
  EXPECT_GE(recipes, 8);
}

}  // namespace
}  // namespace stoker
