// Runs the `trainer` program as a user would and checks exit codes and messages.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "test_util.h"

namespace stoker {
namespace {
namespace fs = std::filesystem;
using stoker::testing::TempDir;

struct Result {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

Result run_trainer(const std::string& args) {
  const std::string command = std::string(STOKER_TRAINER_BIN) + " " + args + " 2>&1";
  Result r;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) r.output.append(buffer, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

void write_text(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

std::string tiny_recipe(const fs::path& data, const fs::path& runs, int epochs) {
  return fmt::format(R"(run: {{name: cli, dir: "{}", device: cpu, threads: 1}}
data: {{root: "{}", batch_size: 32, eval_batch_size: 64, mean: [0.5], std: [0.3]}}
model: {{widths: [8, 16], blocks: [1, 1]}}
train: {{epochs: {}, log_every_steps: 5}}
)",
                     runs.string(), data.string(), epochs);
}

TEST(TrainerCli, MissingConfigFileIsAClearError) {
  const Result r = run_trainer("--config /nonexistent/x.yaml");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("error: /nonexistent/x.yaml: cannot read the config file (no such file)"),
            std::string::npos) << r.output;
}

TEST(TrainerCli, BadCommandLineShowsUsage) {
  Result r = run_trainer("");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--config FILE is required"), std::string::npos) << r.output;
  r = run_trainer("--config a.yaml --frobnicate");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("unknown argument '--frobnicate'"), std::string::npos) << r.output;
}

TEST(TrainerCli, InvalidConfigNamesKeyAndLine) {
  TempDir dir;
  write_text(dir / "bad.yaml", "optimizer:\n  lr: fast\n");
  const Result r = run_trainer("--config " + (dir / "bad.yaml").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("bad.yaml: optimizer.lr at line 2: expected a positive number, got \"fast\""),
            std::string::npos) << r.output;
}

TEST(TrainerCli, MissingDatasetSaysHowToGetIt) {
  TempDir dir;
  write_text(dir / "r.yaml", "data:\n  root: " + (dir / "nowhere").string() + "\n");
  const Result r = run_trainer("--config " + (dir / "r.yaml").string() + " --set run.dir=" + (dir / "runs").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("apt-get install dataset-fashion-mnist"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "runs")) << "a failed start must not leave a run directory";
}

TEST(TrainerCli, UnwritableRunDirectoryIsAClearError) {
  TempDir data;
  stoker::testing::write_synthetic_idx_dataset(data.path(), 64, 64, 8);
  write_text(data / "r.yaml", tiny_recipe(data.path(), "/proc/stoker-cannot-write-here", 1));
  const Result r = run_trainer("--config " + (data / "r.yaml").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("cannot create the run directory /proc/stoker-cannot-write-here"),
            std::string::npos) << r.output;
}

TEST(TrainerCli, PrintConfigShowsTheResolvedValues) {
  const Result r = run_trainer(std::string("--config ") + STOKER_SOURCE_DIR +
                               "/configs/fashion_mnist.yaml --set optimizer.lr=0.03 --print-config");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("optimizer:\n  type: sgd\n  lr: 0.03\n"), std::string::npos) << r.output;
}

TEST(TrainerCli, TrainsStopsOnSignalAndResumes) {
  TempDir data;
  stoker::testing::write_synthetic_idx_dataset(data.path(), 2048, 128, 12);
  write_text(data / "r.yaml", tiny_recipe(data.path(), data / "runs", 40));
  const std::string log = (data / "out.txt").string();

  // Start a long run in the background, wait for its first metrics, then send SIGTERM.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const std::string cfg = (data / "r.yaml").string();
    freopen(log.c_str(), "w", stdout);
    dup2(fileno(stdout), 2);
    execl(STOKER_TRAINER_BIN, STOKER_TRAINER_BIN, "--config", cfg.c_str(), (char*)nullptr);
    _exit(127);
  }
  fs::path run_dir;
  for (int i = 0; i < 600 && run_dir.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!fs::exists(data / "runs/cli")) continue;
    for (const auto& e : fs::directory_iterator(data / "runs/cli")) {
      if (fs::exists(e.path() / "metrics.jsonl") && fs::file_size(e.path() / "metrics.jsonl") > 0) run_dir = e.path();
    }
  }
  ASSERT_FALSE(run_dir.empty()) << "no metrics appeared";
  kill(child, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  const std::string output = stoker::testing::read_bytes(log);
  ASSERT_TRUE(WIFEXITED(status)) << output;
  EXPECT_EQ(WEXITSTATUS(status), 130) << output;
  EXPECT_NE(output.find("--resume " + run_dir.string()), std::string::npos) << output;
  ASSERT_TRUE(fs::is_regular_file(run_dir / "checkpoints/last.pt"));

  // Resume, to the end of the epoch after the one it stopped in: it must continue from the saved
  // step. The log said "stopped at epoch E, batch B".
  const auto at = output.find("stopped at epoch ");
  ASSERT_NE(at, std::string::npos) << output;
  const int stopped_epoch = std::stoi(output.substr(at + 17));
  const Result r = run_trainer("--config " + (data / "r.yaml").string() + " --set train.epochs=" +
                               std::to_string(stopped_epoch + 1) + " --resume " + run_dir.string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resuming " + (run_dir / "checkpoints/last.pt").string()), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(fmt::format("epochs done:     {0} of {0} ({1} optimizer steps)", stopped_epoch + 1,
                                      (stopped_epoch + 1) * 64)),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace stoker
