// Data-parallel training (recipe/join.h, distributed/): the `trainer` program started by hand as
// two Gloo ranks on 127.0.0.1 against one process with the whole batch; one rank killed, failing,
// or stopped by a signal. (Under torchrun: distributed_launch_test.cpp.)
#include "data/settings.h"
#include "recipe/join.h"

#include <signal.h>

#include <gtest/gtest.h>
#include <fmt/format.h>

#include <chrono>
#include <map>

#include "test_util.h"
#include "recipe/distributed_procs.h"

namespace stoker {
namespace {
namespace fs = std::filesystem;
using testing::TempDir;

// ---- in process: when start_distributed joins nothing ------------------------------------------------

distributed::LaunchInfo two_ranks() {
  distributed::LaunchInfo launch;
  launch.launcher = "torchrun";
  launch.world_size = 2;
  launch.rank = 1;
  return launch;
}

TEST(Distributed, OffOrAloneJoinsNothing) {
  Config config;
  config.run.device = "cpu";
  EXPECT_EQ(start_distributed(config, distributed::LaunchInfo()).group, nullptr);
  config.run.distributed = "off";
  const Distributed off = start_distributed(config, two_ranks());
  EXPECT_EQ(off.group, nullptr);
  EXPECT_EQ(off.world_size(), 1);
  EXPECT_TRUE(off.writes());
  EXPECT_EQ(config.data.shard_count, 1);
}

TEST(Distributed, ShardsInTheConfigAreRefusedUnderALauncher) {
  Config config;
  config.run.device = "cpu";
  config.data.shard_count = 2;
  EXPECT_CONTAINS(testing::error_of([&] { start_distributed(config, two_ranks()); }),
                  "under a launcher the process group decides each rank's shard");
}

// The rank and the world size reach the data layer as derived context, not as the user's keys: the
// saved config of a launched run holds no shard settings, and the batch arithmetic counts the ranks.
TEST(Distributed, RanksAreDerivedContextNotConfigKeys) {
  Config config;
  config.data.batch_size = 32;
  config.train.effective_batch_size = 128;
  data::LoaderContext context;
  context.rank = 1;
  context.world_size = 2;
  const data::LoaderOptions train = data::loader_options(config.data, "train", context);
  EXPECT_EQ(train.shard_rank, 1);
  EXPECT_EQ(train.shard_count, 2);
  EXPECT_TRUE(train.even_shards);
  EXPECT_EQ(config.data.shard_count, 1);
  EXPECT_EQ(config_to_yaml(config).find("shard_count: 2"), std::string::npos);
  EXPECT_EQ(batch_arithmetic(config, 2).accumulate_steps, 2);  // 128 = 32 x 2 ranks x 2
  EXPECT_EQ(batch_arithmetic(config, 2).global_batch, 128);
  EXPECT_EQ(batch_arithmetic(config).accumulate_steps, 4);  // alone: 32 x 4
  // Sharding by hand (run.distributed: off) still reads the keys.
  config.data.shard_rank = 1;
  config.data.shard_count = 4;
  const data::LoaderOptions by_hand = data::loader_options(config.data, "train", data::LoaderContext());
  EXPECT_EQ(by_hand.shard_rank, 1);
  EXPECT_EQ(by_hand.shard_count, 4);
}

// Issue 24, G4: a launcher that gives each task one visible GPU (Slurm --gpus-per-task) must not be
// refused on every rank but 0; the local rank indexes the devices only when the node shows them all.
TEST(Distributed, EachRanksCudaDeviceFromTheVisibleDevices) {
  distributed::LaunchInfo launch;
  launch.rank = 5;
  launch.local_rank = 3;
  EXPECT_EQ(rank_device_index(launch, 1), 0);  // one GPU visible to this task: it is its own
  EXPECT_EQ(rank_device_index(launch, 8), 3);  // all eight of the node visible: the local rank's
  EXPECT_CONTAINS(testing::error_of([&] { rank_device_index(launch, 2); }),
                  "rank 5 is local rank 3 on its node, but it sees only 2 CUDA device(s)");
  launch.local_rank = 0;
  EXPECT_EQ(rank_device_index(launch, 2), 0);
}

TEST(Distributed, RunDistributedIsAValidatedKey) {
  EXPECT_EQ(parse_config("run: {distributed: off}\n", "x.yaml").run.distributed, "off");
  EXPECT_CONTAINS(testing::error_of([] { parse_config("run: {distributed: yes}\n", "x.yaml"); }),
                  "run.distributed");
}

// ---- the trainer program as two ranks -----------------------------------------------------------------

struct Ranks {
  std::vector<std::string> logs;
  std::vector<int> exit_codes;
  fs::path run_root;  // <dir>/<name>
};

// Trains the recipe as `ranks` processes (1: alone, no launcher variables), each given `sets`.
Ranks train(const TempDir& dir, const std::string& name, int ranks, const std::vector<std::string>& sets) {
  Ranks run;
  run.run_root = dir / "runs" / name;
  std::vector<std::string> args = {"--config", (dir / "r.yaml").string(), "--set", "run.name=" + name};
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  const std::string port = std::to_string(testing::free_port());
  std::vector<pid_t> pids;
  for (int r = 0; r < ranks; ++r) {
    const auto env = ranks > 1 ? testing::launcher_env(r, ranks, port) : std::map<std::string, std::string>();
    pids.push_back(testing::start_trainer(args, env, dir / fmt::format("{}.rank{}.log", name, r)));
  }
  testing::Reaper reaper(pids);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (int r = 0; r < ranks; ++r) {
    run.exit_codes.push_back(testing::wait_until(pids[r], deadline));
    run.logs.push_back(testing::read_bytes(dir / fmt::format("{}.rank{}.log", name, r)));
  }
  return run;
}

fs::path last_checkpoint(const fs::path& run_root) {
  const std::vector<fs::path> runs = testing::run_dirs(run_root);
  return runs.empty() ? fs::path() : runs.front() / "checkpoints/last.pt";
}

// Issue 33, G24: rank 0 decides train.precision: auto and the other ranks take its decision (each
// deciding alone could train the ranks in different precisions on a busy or mixed machine).
TEST(DistributedTrainer, RankZeroDecidesThePrecisionForAll) {
  TempDir dir;
  testing::write_dist_recipe(dir.path());
  // sample_digests: rank 1 logs at info level too, so its decision line shows.
  const Ranks two = train(dir, "auto", 2, {"train.precision=auto", "logging.sample_digests=true"});
  for (int r = 0; r < 2; ++r) ASSERT_EQ(two.exit_codes[r], 0) << "rank " << r << ":\n" << two.logs[r];
  const auto decision = [](const std::string& log) {
    const size_t at = log.find("train.precision: auto -> ");
    return at == std::string::npos ? std::string() : log.substr(at, log.find('\n', at) - at);
  };
  const std::string zero = decision(two.logs[0]), one = decision(two.logs[1]);
  ASSERT_FALSE(zero.empty()) << two.logs[0];
  EXPECT_EQ(one, zero + " (rank 0's decision)") << two.logs[1];
  EXPECT_EQ(two.logs[1].find("train.precision: auto: timing"), std::string::npos) << "rank 1 timed steps itself";
}

// Tolerance: 2e-5 absolute after 8 SGD steps (float32 sums in another order differ by ~1e-7/step).
TEST(DistributedTrainer, TwoGlooRanksWithHalfBatchesMatchOneProcess) {
  TempDir dir;
  testing::write_dist_recipe(dir.path());
  const Ranks one = train(dir, "one", 1, {});
  ASSERT_EQ(one.exit_codes[0], 0) << one.logs[0];
  const Ranks two = train(dir, "two", 2, {"data.batch_size=8"});
  for (int r = 0; r < 2; ++r) ASSERT_EQ(two.exit_codes[r], 0) << "rank " << r << ":\n" << two.logs[r];
  const Ranks accumulated = train(dir, "acc", 2, {"data.batch_size=4", "train.accumulate_steps=2"});
  for (int r = 0; r < 2; ++r) ASSERT_EQ(accumulated.exit_codes[r], 0) << "rank " << r << ":\n" << accumulated.logs[r];

  // Rank 0 alone wrote a run directory; rank 1 logged no info lines once it had joined.
  ASSERT_EQ(testing::run_dirs(two.run_root).size(), 1u);
  ASSERT_EQ(testing::run_dirs(accumulated.run_root).size(), 1u);
  EXPECT_CONTAINS(two.logs[0], "distributed: rank 0 of 2 (torchrun, gloo backend");
  EXPECT_CONTAINS(two.logs[0], "---- summary ----");
  EXPECT_EQ(two.logs[1].find("---- summary ----"), std::string::npos) << two.logs[1];
  EXPECT_EQ(two.logs[1].find("distributed: rank 1"), std::string::npos) << two.logs[1];

  const auto expected = testing::recipe_weights(last_checkpoint(one.run_root));
  for (const Ranks* run : {&two, &accumulated}) {
    const double diff = testing::max_difference(expected, testing::recipe_weights(last_checkpoint(run->run_root)));
    EXPECT_LT(diff, 2e-5) << "the weights differ by " << diff << " in run " << run->run_root.filename();
    // Sharded evaluation, sums all-reduced: the same numbers over all 40 test samples.
    EXPECT_EQ(testing::final_test_line(run->logs[0]), testing::final_test_line(one.logs[0]));
    EXPECT_CONTAINS(testing::final_test_line(run->logs[0]), "(40 samples)");
  }
}

// Two ranks started by hand on the recipe with `epochs` epochs; their logs go to <dir>/rank<r>.log.
std::vector<pid_t> start_pair(const TempDir& dir, const std::string& epochs) {
  const std::string port = std::to_string(testing::free_port());
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    pids.push_back(testing::start_trainer({"--config", (dir / "r.yaml").string(), "--set", "train.epochs=" + epochs},
                                          testing::launcher_env(r, 2, port), dir / fmt::format("rank{}.log", r)));
  }
  return pids;
}

// A rank killed mid-run: the other stops at its next all-reduce, with an error that names the rank
// that stopped first, well before the process group's 5-minute time-out.
TEST(DistributedTrainer, KillingOneRankEndsTheOtherWithAClearError) {
  TempDir dir;
  testing::write_dist_recipe(dir.path());
  const std::vector<pid_t> pids = start_pair(dir, "100000");
  testing::Reaper reaper(pids);
  const bool training = testing::wait_for_metrics(dir / "runs/run", std::chrono::seconds(60));
  ::kill(pids[1], SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  const int code = testing::wait_until(pids[0], killed + std::chrono::seconds(60));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  const std::string log = testing::read_bytes(dir / "rank0.log");
  ASSERT_TRUE(training) << log;
  EXPECT_EQ(code, 1) << log;
  EXPECT_LT(seconds, 30.0);
  EXPECT_CONTAINS(log, "error: rank 0 of 2: ");
  EXPECT_CONTAINS(log, "rank 1 stopped without a word");
}

// An error on one rank after the ranks joined (here rank 1's data folder is missing): it leaves its
// error in the rendezvous store, and rank 0's error names rank 1 and says why.
TEST(DistributedTrainer, AnErrorOnOneRankIsNamedInTheOthersErrors) {
  TempDir dir;
  testing::write_dist_recipe(dir.path());
  std::string missing = testing::read_bytes(dir / "r.yaml");
  const size_t at = missing.find("  type: synthetic\n"), line = missing.find("  synthetic: {");
  ASSERT_TRUE(at != std::string::npos && line != std::string::npos);
  missing.erase(line, missing.find('\n', line) + 1 - line);
  missing.replace(at, 18, "  type: image_folder\n  root: " + (dir / "missing").string() + "\n");
  testing::write_bytes(dir / "r1.yaml", missing);
  const std::string port = std::to_string(testing::free_port());
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    pids.push_back(testing::start_trainer({"--config", (dir / (r == 0 ? "r.yaml" : "r1.yaml")).string()},
                                          testing::launcher_env(r, 2, port), dir / fmt::format("rank{}.log", r)));
  }
  testing::Reaper reaper(pids);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  const int code1 = testing::wait_until(pids[1], deadline), code0 = testing::wait_until(pids[0], deadline);
  const std::string log0 = testing::read_bytes(dir / "rank0.log");
  EXPECT_EQ(code1, 1) << testing::read_bytes(dir / "rank1.log");
  EXPECT_EQ(code0, 1) << log0;
  EXPECT_CONTAINS(log0, "error: rank 0 of 2: rank 1 failed first: data.root ");
  EXPECT_CONTAINS(log0, "missing is not a folder");
}

// SIGTERM to one rank only: the ranks agree on the stop at the next step, so both stop at the same
// step (exit status 130), and rank 0 saves the checkpoint there.
TEST(DistributedTrainer, AStopSignalToOneRankStopsBothAtTheSameStep) {
  TempDir dir;
  testing::write_dist_recipe(dir.path());
  const std::vector<pid_t> pids = start_pair(dir, "100000");
  testing::Reaper reaper(pids);
  const bool training = testing::wait_for_metrics(dir / "runs/run", std::chrono::seconds(60));
  ::kill(pids[1], SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  const int code1 = testing::wait_until(pids[1], deadline), code0 = testing::wait_until(pids[0], deadline);
  const std::string log0 = testing::read_bytes(dir / "rank0.log"), log1 = testing::read_bytes(dir / "rank1.log");
  ASSERT_TRUE(training) << log0;
  EXPECT_EQ(code0, 130) << log0;
  EXPECT_EQ(code1, 130) << log1;
  const std::vector<fs::path> runs = testing::run_dirs(dir / "runs/run");
  ASSERT_EQ(runs.size(), 1u);
  const int64_t step = testing::checkpoint_step(runs.front() / "checkpoints/last.pt");
  EXPECT_GT(step, 0);
  // Both logs' stop lines name the same step: rank 0's "stopped at ... (step N)".
  EXPECT_CONTAINS(log0, fmt::format("(step {}); saved", step));
  EXPECT_CONTAINS(log1, fmt::format("stopped with the other ranks at step {}", step));
}

// Batches independent of the world size: with train.effective_batch_size 16 and batch 8, one process
// accumulates two batches per step and two ranks take one each; every step trains on the same
// samples with the same augmentation seeds (the ranks' digests XOR to the process's), and the weights
// agree to float32 rounding. A run stopped on two ranks mid-epoch resumes as one process and goes on
// with exactly the samples an uninterrupted one-process run trains on at those steps.
TEST(DistributedTrainer, EveryStepSeesTheSameSamplesOnOneOrTwoRanksAndAResumeMayChangeTheWorldSize) {
  TempDir dir;
  testing::write_dist_recipe(dir.path());
  const std::vector<std::string> sets = {"data.batch_size=8", "train.effective_batch_size=16",
                                         "logging.sample_digests=true"};
  const Ranks one = train(dir, "one", 1, sets);
  ASSERT_EQ(one.exit_codes[0], 0) << one.logs[0];
  const Ranks two = train(dir, "two", 2, sets);
  for (int r = 0; r < 2; ++r) ASSERT_EQ(two.exit_codes[r], 0) << "rank " << r << ":\n" << two.logs[r];
  const auto alone = testing::sample_digests(one.logs);
  ASSERT_EQ(alone.size(), 8u) << one.logs[0];  // 2 epochs of 64 samples, 16 per step
  EXPECT_EQ(testing::sample_digests(two.logs), alone);
  const double diff = testing::max_difference(testing::recipe_weights(last_checkpoint(one.run_root)),
                                              testing::recipe_weights(last_checkpoint(two.run_root)));
  EXPECT_LT(diff, 2e-5) << "one process accumulating 2 x 8 and 2 ranks x 8 differ by " << diff;

  // Stopped on two ranks mid-run (SIGTERM to rank 1; both stop at one step and rank 0 saves)...
  std::vector<std::string> args = {"--config", (dir / "r.yaml").string(), "--set", "run.name=cut",
                                   "--set", "train.epochs=100000"};
  for (const auto& set : sets) args.insert(args.end(), {"--set", set});
  const std::string port = std::to_string(testing::free_port());
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    pids.push_back(testing::start_trainer(args, testing::launcher_env(r, 2, port), dir / fmt::format("cut{}.log", r)));
  }
  testing::Reaper reaper(pids);
  ASSERT_TRUE(testing::wait_for_metrics(dir / "runs/cut", std::chrono::seconds(60)));
  ::kill(pids[1], SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  testing::wait_until(pids[1], deadline);
  testing::wait_until(pids[0], deadline);
  const fs::path checkpoint = last_checkpoint(dir / "runs/cut");
  const int64_t stopped = testing::checkpoint_step(checkpoint);
  ASSERT_GT(stopped, 0);
  // ...resumed as one process (train.epochs set so that it ends 7 steps later, mid-epoch or not)...
  const int64_t epochs = (stopped + 7) / 4 + 1;
  const std::string run_dir = checkpoint.parent_path().parent_path().string();
  const pid_t resumed_pid = testing::start_trainer(
      {"--resume", run_dir, "--set", fmt::format("train.epochs={}", epochs), "--allow-config-change"}, {},
      dir / "resumed.log");
  ASSERT_EQ(testing::wait_until(resumed_pid, std::chrono::steady_clock::now() + std::chrono::seconds(120)), 0)
      << testing::read_bytes(dir / "resumed.log");
  // ...trains the steps after the stop on the samples of an uninterrupted one-process run.
  std::vector<std::string> reference_sets = sets;
  reference_sets.push_back(fmt::format("train.epochs={}", epochs));
  const Ranks reference = train(dir, "reference", 1, reference_sets);
  ASSERT_EQ(reference.exit_codes[0], 0) << reference.logs[0];
  const auto expected = testing::sample_digests(reference.logs);
  const auto resumed = testing::sample_digests({testing::read_bytes(dir / "resumed.log")});
  ASSERT_EQ(resumed.size(), static_cast<size_t>(4 * epochs - stopped));
  EXPECT_EQ(resumed.begin()->first, stopped + 1);
  for (const auto& [step, digest] : resumed) EXPECT_EQ(digest, expected.at(step)) << "step " << step;
  // The steps before the stop, on two ranks, were the reference's too.
  const auto cut =
      testing::sample_digests({testing::read_bytes(dir / "cut0.log"), testing::read_bytes(dir / "cut1.log")});
  for (int64_t step = 1; step <= stopped; ++step) EXPECT_EQ(cut.at(step), expected.at(step)) << "step " << step;
}

}  // namespace
}  // namespace stoker
