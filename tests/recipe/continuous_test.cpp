// recipe/continuous.h: data.autotune: continuous's decision on recorded logging windows
// (RecipeContinuous), and its callback applying a change to a loader between steps.
#include "recipe/continuous.h"

#include <algorithm>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "test_util.h"

namespace stoker {
namespace {

struct Window {
  double wait, samples_per_s;
};

// Feeds the windows and returns each one's worker count, and the lines said.
std::vector<int64_t> feed(ContinuousState& state, const ContinuousPolicy& policy, const std::vector<Window>& windows,
                          std::vector<std::string>* said = nullptr) {
  std::vector<int64_t> workers;
  for (const Window& w : windows) {
    const ContinuousStep step = continuous_step(state, policy, w.wait, w.samples_per_s);
    workers.push_back(step.workers);
    if (said != nullptr && !step.why.empty()) said->push_back(step.why);
  }
  return workers;
}

TEST(RecipeContinuous, StarvedWindowsAddWorkersAfterACooldownEach) {
  ContinuousState state;
  std::vector<std::string> said;
  // Three starved windows: 0 -> 1. Five windows of cooldown (starved or not, nothing changes); the
  // change paid (200 -> 330), so it stays; three more starved windows: 1 -> 2.
  const std::vector<int64_t> workers = feed(state, {},
                                            {{0.4, 200}, {0.4, 200}, {0.4, 200},
                                             {0.3, 330}, {0.3, 330}, {0.3, 330}, {0.3, 330}, {0.3, 330},
                                             {0.3, 330}, {0.3, 330}, {0.3, 330}, {0.01, 400}},
                                            &said);
  EXPECT_EQ(workers, (std::vector<int64_t>{0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2}));
  ASSERT_EQ(said.size(), 2u);
  EXPECT_EQ(said[0], "workers 0 -> 1: the step waited for data over 10% of the time for 3 windows (200.0 samples/s)");
  EXPECT_EQ(said[1], "workers 1 -> 2: the step waited for data over 10% of the time for 3 windows (330.0 samples/s)");
}

TEST(RecipeContinuous, BetweenTheThresholdsAWindowNeitherCountsNorEndsAStreak) {
  ContinuousState a;
  EXPECT_EQ(feed(a, {}, {{0.3, 100}, {0.07, 100}, {0.3, 100}, {0.3, 100}}).back(), 1);  // 0.07: hysteresis
  ContinuousState b;
  EXPECT_EQ(feed(b, {}, {{0.3, 100}, {0.3, 100}, {0.01, 100}, {0.3, 100}, {0.3, 100}}).back(), 0);  // fed: reset
}

TEST(RecipeContinuous, AChangeThatDoesNotPayIsUndoneForGoodSoItNeverOscillates) {
  ContinuousState state;
  state.workers = 2;
  std::vector<std::string> said;
  // Starved at 2 workers; 4 trains slower (the workers took the model's cores): back to 2, and 2
  // stays the most however long the step goes on waiting.
  std::vector<Window> windows = {{0.4, 300}, {0.4, 300}, {0.4, 300}};
  for (int i = 0; i < 5; ++i) windows.push_back({0.2, 250});
  for (int i = 0; i < 100; ++i) windows.push_back({0.4, 300});
  const std::vector<int64_t> workers = feed(state, {}, windows, &said);
  EXPECT_EQ(workers[2], 4);
  EXPECT_EQ(workers[7], 2);
  EXPECT_EQ(workers.back(), 2);
  ASSERT_EQ(said.size(), 2u) << "one rise, one undo, nothing after";
  EXPECT_EQ(said[1], "workers 4 -> 2: 4 workers trained 250.0 samples/s against 300.0 before; 2 stays the most");
  EXPECT_EQ(state.cap, 2);
}

TEST(RecipeContinuous, TheWorkersStopAtTheMost) {
  ContinuousPolicy policy;
  policy.max_workers = 3;
  policy.cooldown = 1;
  ContinuousState state;
  std::vector<Window> windows(40, Window{0.5, 100});
  for (size_t i = 0; i < windows.size(); ++i) windows[i].samples_per_s = 100.0 + static_cast<double>(i);  // each pays
  const std::vector<int64_t> workers = feed(state, policy, windows);
  EXPECT_EQ(workers.back(), 3);  // 0 -> 1 -> 2 -> 3 (the most), not 4
  EXPECT_EQ(*std::max_element(workers.begin(), workers.end()), 3);
}

// On CUDA the GPU's idle share counts too, but only while the step also waited for data: idle with no
// data wait is the host's own overhead, which more workers do not cure.
TEST(RecipeContinuous, GpuIdleCountsAsStarvedOnlyWhileTheStepAlsoWaitsForData) {
  ContinuousPolicy policy;  // starved_wait 0.10, fed_wait 0.05, starved_gpu_idle 0.10
  auto run = [&](double wait, std::optional<double> idle) {
    ContinuousState state;
    ContinuousStep step;
    for (int i = 0; i < 3; ++i) step = continuous_step(state, policy, wait, 100, idle);
    return step;
  };
  const ContinuousStep idle_and_waiting = run(0.07, 0.4);  // between the wait thresholds, GPU idle 40%
  EXPECT_EQ(idle_and_waiting.workers, 1);
  EXPECT_EQ(idle_and_waiting.why, "workers 0 -> 1: the step waited for data over 10% of the time or the GPU sat idle "
                                  "over 10% for 3 windows (100.0 samples/s)");
  EXPECT_EQ(run(0.07, std::nullopt).workers, 0);  // the CPU, or no reading: the wait alone decides
  EXPECT_EQ(run(0.01, 0.9).workers, 0);           // idle, but the step did not wait for data
  EXPECT_EQ(run(0.07, 0.05).workers, 0);          // waiting a little, GPU busy
  // An idle-and-waiting window does not end a streak either.
  ContinuousState state;
  continuous_step(state, policy, 0.3, 100, 0.0);
  continuous_step(state, policy, 0.03, 100, 0.0);  // fed: ends it
  EXPECT_EQ(state.streak, 0);
  continuous_step(state, policy, 0.3, 100, 0.0);
  continuous_step(state, policy, 0.06, 100, 0.5);
  EXPECT_EQ(state.streak, 2);
}

TEST(RecipeContinuous, ThePolicyComesFromTheConfigWithTheMostWorkersFromTheCores) {
  data::AutotuneWatch watch;
  watch.starved_wait = 0.2;
  watch.fed_wait = 0.1;
  watch.windows = 2;
  watch.cooldown = 7;
  ContinuousPolicy p = ContinuousPolicy::from(watch, 2);
  EXPECT_EQ(p.starved_wait, 0.2);
  EXPECT_EQ(p.fed_wait, 0.1);
  EXPECT_EQ(p.windows, 2);
  EXPECT_EQ(p.cooldown, 7);
  EXPECT_EQ(p.max_workers, 4);                                   // 0: twice the cores ...
  EXPECT_EQ(ContinuousPolicy::from(watch, 64).max_workers, 8);  // ... at most 8
  watch.max_workers = 12;
  EXPECT_EQ(ContinuousPolicy::from(watch, 2).max_workers, 12);  // as set
}

// The callback: windows of 2 steps; three starved windows add a worker to the loader itself, between
// steps, and the batches handed out stay those of a loader that never changed.
TEST(RecipeContinuous, TheCallbackChangesTheLoadersWorkersBetweenStepsKeepingTheBatches) {
  std::vector<uint8_t> pixels(64 * 4 * 4);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i % 251);
  std::vector<int64_t> labels(64);
  for (int64_t i = 0; i < 64; ++i) labels[i] = i % 10;
  auto dataset = std::make_shared<data::TensorImageDataset>(std::move(pixels), std::move(labels), 4, 4, 1, 10, "t");
  data::LoaderOptions o;
  o.batch_size = 4;
  o.seed = 3;
  data::Loader reference(dataset, o);
  reference.start_epoch(0);
  auto loader = std::make_shared<data::RetunableLoader>(dataset, o);
  ContinuousWorkers callback(loader, {}, 2, /*run_threads=*/1, /*on_cpu=*/true);
  loader->start_epoch(0);
  std::vector<std::string> said;
  for (int64_t s = 0; s < 16; ++s) {
    const auto want = reference.next();
    const auto got = loader->next();
    ASSERT_TRUE(got.has_value() && want.has_value());
    EXPECT_TRUE(torch::equal(got->input, want->input)) << "batch " << s;
    StepInfo step;
    step.step = s + 1;
    step.samples = 4;
    step.data_seconds = 0.5;  // half of every step waiting for data
    step.step_seconds = 1.0;
    if (std::string why = callback.observe(step); !why.empty()) said.push_back(why);
  }
  ASSERT_EQ(said.size(), 1u);
  EXPECT_EQ(said[0], "workers 0 -> 1: the step waited for data over 10% of the time for 3 windows (4.0 samples/s)");
  EXPECT_EQ(loader->options().workers, 1);
  EXPECT_EQ(callback.state().since_change, -1);  // judged after its 5-window cooldown: kept (not slower)
}

}  // namespace
}  // namespace stoker
