// data.autotune: start through run_training (recipe/run.h): the hook's values are trained with and
// recorded in the run directory, and a resumed run keeps them without tuning again. The hook here
// returns recorded values (the doctor's real tune is tested in tests/doctor).
#include <gtest/gtest.h>

#include "recipe/run.h"
#include "trainer/checkpoint.h"
#include "test_config.h"

namespace stoker {
namespace {
namespace fs = std::filesystem;

// A recorded tune: workers 0 -> 2, prefetch_factor 2 -> 3, cache none -> raw.
AutotuneOutcome recorded_tune(const Config& config) {
  AutotuneOutcome out;
  out.config = config;
  out.config.data.workers = 2;
  out.config.data.prefetch_factor = 3;
  out.config.data.cache = data::DataCache::kRaw;
  out.line = "data.autotune: start: workers 0 -> 2 (recorded)";
  out.doctor_json = "{\"autotune\":\"start\",\"workers\":2}\n";
  return out;
}

TEST(AutotuneResume, ResumeKeepsTheTunedValuesAndDoesNotTuneAgain) {
  testing::TempDir data, runs;
  testing::write_synthetic_idx_dataset(data.path(), 128, 64, 12);
  int tunes = 0;
  auto hook = [&](const RunPlan& plan) {
    ++tunes;
    return recorded_tune(plan.config);
  };
  TrainRequest first;
  first.config = testing::tiny_config(data.path(), runs.path());
  first.config.train.epochs = 1;
  first.config.data.autotune = "start";
  first.autotune = hook;
  const TrainOutcome one = run_training(first);
  EXPECT_EQ(tunes, 1);
  // The run directory holds the tuned values: config.yaml, the checkpoint's config, doctor.json, the log.
  const Config written = load_config(one.run_dir / "config.yaml");
  EXPECT_EQ(written.data.workers, 2);
  EXPECT_EQ(written.data.prefetch_factor, 3);
  EXPECT_EQ(written.data.cache, data::DataCache::kRaw);
  EXPECT_EQ(testing::read_bytes(one.run_dir / "doctor.json"), "{\"autotune\":\"start\",\"workers\":2}\n");
  EXPECT_CONTAINS(testing::read_bytes(one.run_dir / "train.log"), "data.autotune: start: workers 0 -> 2 (recorded)");

  // Resumed as `trainer --resume RUN --config RECIPE --set train.epochs=2 --allow-config-change` would:
  // the recipe says workers 0; the run keeps what its start tuned, read from its checkpoint.
  TrainRequest second;
  second.config = first.config;
  second.config.train.epochs = 2;
  second.resume = one.run_dir;
  second.allow_config_change = true;
  second.autotune = hook;
  const TrainOutcome two = run_training(second);
  EXPECT_EQ(tunes, 1);  // not tuned again
  EXPECT_EQ(two.state.epoch, 2);
  const Config resumed = parse_config(read_checkpoint_config(one.run_dir / "checkpoints" / "last.pt"), "last.pt");
  EXPECT_EQ(resumed.data.workers, 2);
  EXPECT_EQ(resumed.data.prefetch_factor, 3);
  EXPECT_EQ(resumed.data.cache, data::DataCache::kRaw);
  const std::string log = testing::read_bytes(one.run_dir / "train.log");
  EXPECT_CONTAINS(log, "data.autotune: start: keeping the loader settings the run's start tuned");
  EXPECT_CONTAINS(log, "workers 2, prefetch_factor 3, device_prefetch 2, cache raw");
  EXPECT_EQ(log.find("data.workers: 2 -> 0"), std::string::npos) << log;  // no config change logged
}

TEST(AutotuneResume, AutotuneWithoutTheDoctorsHookIsAnError) {
  testing::TempDir data, runs;
  testing::write_synthetic_idx_dataset(data.path(), 64, 32, 12);
  TrainRequest request;
  request.config = testing::tiny_config(data.path(), runs.path());
  request.config.data.autotune = "start";
  EXPECT_CONTAINS(testing::error_of([&] { run_training(request); }),
                  "data.autotune: start needs the doctor: this program does not set TrainRequest::autotune");
}

}  // namespace
}  // namespace stoker
