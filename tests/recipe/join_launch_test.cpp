// Data-parallel training launched as users launch it: `python -m torch.distributed.run --standalone
// --nproc-per-node 2 --no-python trainer ...` (the libtorch venv's Python; skipped, saying why,
// without it). One run directory, metrics from rank 0 alone, sharded evaluation equal to one
// process's; SIGINT to the launcher stops both ranks at one step, rank 0 saves, and the run resumes
// on two ranks to the uninterrupted run's weights; one process taking a smaller global batch is refused.
#include <signal.h>

#include <gtest/gtest.h>
#include <fmt/format.h>

#include <chrono>
#include <fstream>

#include "test_util.h"
#include "recipe/distributed_procs.h"

namespace stoker {
namespace {
namespace fs = std::filesystem;
using testing::TempDir;

class DistributedLaunch : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    python_ = testing::venv_python(&why);
    if (python_.empty()) GTEST_SKIP() << why;
    testing::write_dist_recipe(dir_.path());
  }

  // Starts the trainer under torchrun (2 ranks) with `args`; the ranks' output goes to
  // <dir>/<name>.logs (read with rank_log), the launcher's to <dir>/<name>.launcher.log.
  pid_t start_torchrun(const std::string& name, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {python_.string(), "-m", "torch.distributed.run", "--standalone",
                                     "--nproc-per-node", "2", "--log-dir", (dir_ / (name + ".logs")).string(),
                                     "--redirects", "3", "--no-python", STOKER_TRAINER_BIN};
    argv.insert(argv.end(), args.begin(), args.end());
    return testing::start_process(argv, {}, dir_ / (name + ".launcher.log"));
  }

  // Runs the trainer under torchrun to its end (at most 120 s); the launcher's exit code.
  int torchrun(const std::string& name, const std::vector<std::string>& args) {
    const pid_t pid = start_torchrun(name, args);
    testing::Reaper reaper({pid});
    return testing::wait_until(pid, std::chrono::steady_clock::now() + std::chrono::seconds(120));
  }

  // Everything local rank `rank` wrote in the torchrun run `name`.
  std::string rank_log(const std::string& name, int rank) const {
    std::string out;
    const fs::path logs = dir_ / (name + ".logs");
    if (!fs::exists(logs)) return out;
    for (const auto& e : fs::recursive_directory_iterator(logs)) {
      if (e.is_regular_file() && e.path().parent_path().filename() == std::to_string(rank)) {
        out += testing::read_bytes(e.path());
      }
    }
    return out;
  }

  // The recipe trained by one process, without a launcher, under run.name `name`.
  int alone(const std::string& name, const std::vector<std::string>& args) {
    const pid_t pid = testing::start_trainer(args, {}, dir_ / (name + ".log"));
    testing::Reaper reaper({pid});
    return testing::wait_until(pid, std::chrono::steady_clock::now() + std::chrono::seconds(120));
  }

  std::vector<std::string> recipe(const std::string& name, const std::vector<std::string>& sets) const {
    std::vector<std::string> args = {"--config", (dir_ / "r.yaml").string(), "--set", "run.name=" + name};
    for (const auto& s : sets) args.insert(args.end(), {"--set", s});
    return args;
  }

  fs::path only_run(const std::string& name) const {
    const std::vector<fs::path> runs = testing::run_dirs(dir_ / "runs" / name);
    return runs.size() == 1 ? runs.front() : fs::path();
  }

  TempDir dir_;
  fs::path python_;
};

int64_t count_of(const std::string& text, const std::string& part) {
  int64_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST_F(DistributedLaunch, OneRunDirectoryMetricsFromRankZeroAndShardedEvaluationAsOneProcess) {
  ASSERT_EQ(alone("one", recipe("one", {})), 0) << testing::read_bytes(dir_ / "one.log");
  ASSERT_EQ(torchrun("two", recipe("two", {"data.batch_size=8"})), 0)
      << testing::read_bytes(dir_ / "two.launcher.log") << rank_log("two", 0) << rank_log("two", 1);
  const std::string log0 = rank_log("two", 0), log1 = rank_log("two", 1);
  // One run directory, made by rank 0; rank 1 joined (as torchrun's rank 1) and logged no run lines.
  const fs::path run = only_run("two");
  ASSERT_FALSE(run.empty()) << log0;
  EXPECT_CONTAINS(log0, "distributed: rank 0 of 2 (torchrun, gloo backend");
  EXPECT_EQ(log1.find("run directory:"), std::string::npos) << log1;
  EXPECT_EQ(log1.find("---- summary ----"), std::string::npos) << log1;
  // Metrics from rank 0 alone: each of the 8 steps (2 epochs of 4) once, each epoch once.
  const std::string metrics = testing::read_bytes(run / "metrics.jsonl");
  for (int step = 1; step <= 8; ++step) {
    EXPECT_EQ(count_of(metrics, fmt::format("\"step\":{},", step)), step % 4 == 0 ? 2 : 1) << metrics;
  }
  // Sharded evaluation, sums all-reduced: the same numbers over all 40 test samples.
  EXPECT_EQ(testing::final_test_line(log0), testing::final_test_line(testing::read_bytes(dir_ / "one.log")));
  EXPECT_CONTAINS(testing::final_test_line(log0), "(40 samples)");
}

// SIGINT to the launcher (as Ctrl-C on its terminal, or Slurm's scancel --signal=INT): torchrun
// passes it to both ranks, they agree to stop at the same step, rank 0 saves last.pt; the run
// resumes on two ranks and ends with exactly the uninterrupted run's weights (the same all-reduces
// in the same order: bit-exact). Resuming it as one process with the same data.batch_size (half the
// global batch) is refused, naming the flags that keep the global batch.
TEST_F(DistributedLaunch, SigintStopsBothRanksAndTheRunResumesOnTwoRanksExactly) {
  const std::vector<std::string> sets = {"data.batch_size=8", "train.epochs=40"};
  ASSERT_EQ(torchrun("full", recipe("full", sets)), 0) << rank_log("full", 0) << rank_log("full", 1);

  const pid_t launcher = start_torchrun("cut", recipe("cut", sets));
  testing::Reaper reaper({launcher});
  const bool training = testing::wait_for_metrics(dir_ / "runs/cut", std::chrono::seconds(90));  // torchrun starts Python first
  ::kill(launcher, SIGINT);
  testing::wait_until(launcher, std::chrono::steady_clock::now() + std::chrono::seconds(60));
  const std::string cut0 = rank_log("cut", 0), cut1 = rank_log("cut", 1);
  ASSERT_TRUE(training) << testing::read_bytes(dir_ / "cut.launcher.log") << cut0;
  const fs::path run = only_run("cut");
  ASSERT_FALSE(run.empty());
  const int64_t step = testing::checkpoint_step(run / "checkpoints/last.pt");
  ASSERT_LT(step, 160) << "the run ended before SIGINT arrived:\n" << cut0;
  EXPECT_CONTAINS(cut0, fmt::format("(step {}); saved", step));
  EXPECT_CONTAINS(cut1, fmt::format("stopped with the other ranks at step {}", step));

  ASSERT_EQ(torchrun("resumed", {"--resume", run.string()}), 0) << rank_log("resumed", 0) << rank_log("resumed", 1);
  const std::string resumed0 = rank_log("resumed", 0);
  EXPECT_CONTAINS(resumed0, fmt::format("(step {})", step));
  const double diff = testing::max_difference(testing::recipe_weights(only_run("full") / "checkpoints/last.pt"),
                                              testing::recipe_weights(run / "checkpoints/last.pt"));
  EXPECT_EQ(diff, 0.0) << "the resumed run's weights differ from the uninterrupted run's by " << diff;
  EXPECT_EQ(testing::final_test_line(resumed0), testing::final_test_line(rank_log("full", 0)));

  // Another world size: one process, no launcher, 8 samples per step instead of 16.
  EXPECT_EQ(alone("alone", {"--resume", run.string(), "--set", "train.epochs=41", "--allow-config-change"}), 1);
  EXPECT_CONTAINS(testing::read_bytes(dir_ / "alone.log"), "its run took 16 samples per optimizer step");
  EXPECT_CONTAINS(testing::read_bytes(dir_ / "alone.log"), "--set train.effective_batch_size=16");
}

}  // namespace
}  // namespace stoker
