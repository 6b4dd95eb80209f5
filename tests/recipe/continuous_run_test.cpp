// data.autotune: continuous in a whole run (recipe/run.h): the synthetic data set's input cost rises
// at an epoch (data.synthetic.slow_from_epoch: each read then sleeps slow_read_us, a slower disk), the
// run notices it within the policy's `windows` logging windows and raises the loader's workers, and
// every step trains on the samples a run with fixed workers trains on (logging.sample_digests).
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <map>
#include <string>

#include "recipe/continuous.h"
#include "recipe/run.h"
#include "test_util.h"

namespace stoker {
namespace {

// 256 samples in batches of 16: 16 steps an epoch, 4 logging windows of 4 steps. From the third
// epoch on each read sleeps 2 ms, 32 ms a batch: with workers 0 the step waits for data most of the
// time whatever the machine's load (a sleep takes no core), and before it the data (16 tiny synthetic
// images) is a sliver of the step.
Config rising_cost_recipe(const std::filesystem::path& runs, const std::string& name, const std::string& autotune,
                          int64_t workers) {
  const std::string yaml = fmt::format(R"(
run: {{name: {}, dir: "{}", seed: 3, device: cpu, threads: 1}}
data:
  type: synthetic
  num_classes: 4
  batch_size: 16
  eval_batch_size: 64
  workers: {}
  autotune: {}
  synthetic: {{train_samples: 256, test_samples: 32, height: 16, width: 16, channels: 1,
              slow_from_epoch: 3, slow_read_us: 2000}}
  mean: [0.5]
  std: [0.25]
model: {{type: compact_resnet, widths: [8, 16], blocks: [1, 1]}}
optimizer: {{type: sgd, lr: 0.05}}
train: {{epochs: 4, log_every_steps: 4}}
logging: {{sample_digests: true}}
)",
                                       name, runs.string(), workers, autotune);
  return parse_config(yaml, name + ".yaml");
}

// logging.sample_digests' lines, "samples of step S (epoch E, batch B): digest X", by step.
std::map<int64_t, std::string> digests(const std::string& log) {
  std::map<int64_t, std::string> by_step;
  const std::string marker = "samples of step ";
  for (size_t at = log.find(marker); at != std::string::npos; at = log.find(marker, at + 1)) {
    const int64_t step = std::stoll(log.substr(at + marker.size()));
    by_step[step] = log.substr(log.find("digest ", at) + 7, 16);
  }
  return by_step;
}

// The steps at which continuous changed the workers ("data.autotune: continuous: at step S: ...").
std::vector<int64_t> changes(const std::string& log) {
  std::vector<int64_t> steps;
  const std::string marker = "data.autotune: continuous: at step ";
  for (size_t at = log.find(marker); at != std::string::npos; at = log.find(marker, at + 1)) {
    steps.push_back(std::stoll(log.substr(at + marker.size())));
  }
  return steps;
}

// The cost rises with step 33 (the first of epoch 3); windows end at steps 36, 40, 44: the third
// starved window (K = ContinuousPolicy::windows = 3) raises the workers at step 44, and none before
// step 33 (the fast epochs wait under 10%). The samples of all 64 steps are those of workers 2.
TEST(ContinuousRun, ARisingInputCostIsNoticedWithinThreeWindowsAndNoSampleChanges) {
  testing::TempDir runs;
  TrainRequest tuned;
  tuned.config = rising_cost_recipe(runs.path(), "continuous", "continuous", 0);
  const TrainOutcome a = run_training(tuned);
  TrainRequest fixed;
  fixed.config = rising_cost_recipe(runs.path(), "fixed", "off", 2);
  const TrainOutcome b = run_training(fixed);

  const std::string log = testing::read_bytes(a.run_dir / "train.log");
  const std::map<int64_t, std::string> seen = digests(log);
  ASSERT_EQ(seen.size(), 64u) << log;
  EXPECT_EQ(seen, digests(testing::read_bytes(b.run_dir / "train.log")));

  const int64_t rise = 33, window = 4, windows = ContinuousPolicy().windows;
  const std::vector<int64_t> at = changes(log);
  ASSERT_FALSE(at.empty()) << "the rising cost was not noticed:\n" << log;
  EXPECT_GE(at.front(), rise) << "workers changed before the cost rose:\n" << log;
  EXPECT_LE(at.front(), rise - 1 + windows * window) << log;
  EXPECT_CONTAINS(log, fmt::format("data.autotune: continuous: at step {}: workers 0 -> 1", at.front()));
}

}  // namespace
}  // namespace stoker
