// Data-parallel training (trainer/distributed.h, dist/): the `trainer` program started as two Gloo
// ranks on 127.0.0.1 against one process with the whole batch.
#include "trainer/distributed.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <chrono>
#include <fstream>
#include <map>
#include <thread>

#include "models/registry.h"
#include "trainer/checkpoint.h"
#include "test_util.h"

extern char** environ;

namespace stoker {
namespace {
namespace fs = std::filesystem;
using testing::TempDir;

// ---- in process: when start_distributed joins nothing ------------------------------------------------

dist::LaunchInfo two_ranks() {
  dist::LaunchInfo launch;
  launch.launcher = "torchrun";
  launch.world_size = 2;
  launch.rank = 1;
  return launch;
}

TEST(Distributed, OffOrAloneJoinsNothing) {
  Config config;
  config.run.device = "cpu";
  EXPECT_EQ(start_distributed(config, dist::LaunchInfo()).group, nullptr);
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

TEST(Distributed, RunDistributedIsAValidatedKey) {
  EXPECT_EQ(parse_config("run: {distributed: off}\n", "x.yaml").run.distributed, "off");
  EXPECT_CONTAINS(testing::error_of([] { parse_config("run: {distributed: yes}\n", "x.yaml"); }),
                  "run.distributed");
}

// ---- the trainer program as two ranks -----------------------------------------------------------------

// A TCP port that was free a moment ago.
int free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = -1;
  if (::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(s);
  return port;
}

// Starts `trainer args...` with this environment less any launcher's variables, plus `extra`;
// stdout and stderr go to `log`.
pid_t start_trainer(const std::vector<std::string>& args, const std::map<std::string, std::string>& extra,
                    const fs::path& log) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string var(*e);
    const std::string name = var.substr(0, var.find('='));
    const bool launcher = name == "RANK" || name == "WORLD_SIZE" || name == "LOCAL_RANK" ||
                          name.rfind("MASTER_", 0) == 0 || name.rfind("SLURM_", 0) == 0 ||
                          name.rfind("TORCHELASTIC_", 0) == 0;
    if (!launcher) env.push_back(var);
  }
  for (const auto& [k, v] : extra) env.push_back(k + "=" + v);
  std::vector<std::string> argv = {STOKER_TRAINER_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv, cenv;
  for (auto& a : argv) cargv.push_back(a.data());
  for (auto& e : env) cenv.push_back(e.data());
  cargv.push_back(nullptr);
  cenv.push_back(nullptr);
  const std::string log_path = log.string();
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execve(cargv[0], cargv.data(), cenv.data());
    _exit(127);
  }
  return pid;
}

// Waits for `pid` until `deadline`, then kills it; its exit code, or -1 when killed or signalled.
int wait_until(pid_t pid, std::chrono::steady_clock::time_point deadline) {
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

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
  const std::string port = std::to_string(free_port());
  std::vector<pid_t> pids;
  for (int r = 0; r < ranks; ++r) {
    std::map<std::string, std::string> env;
    if (ranks > 1) {
      env = {{"RANK", std::to_string(r)}, {"LOCAL_RANK", std::to_string(r)}, {"WORLD_SIZE", std::to_string(ranks)},
             {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}};
    }
    pids.push_back(start_trainer(args, env, dir / fmt::format("{}.rank{}.log", name, r)));
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (int r = 0; r < ranks; ++r) {
    run.exit_codes.push_back(wait_until(pids[r], deadline));
    run.logs.push_back(testing::read_bytes(dir / fmt::format("{}.rank{}.log", name, r)));
  }
  return run;
}

// The run folders under <dir>/<name>/.
std::vector<fs::path> run_dirs(const fs::path& root) {
  std::vector<fs::path> out;
  if (fs::exists(root)) {
    for (const auto& e : fs::directory_iterator(root)) out.push_back(e.path());
  }
  return out;
}

// The named parameters of the checkpoint's model.
std::map<std::string, torch::Tensor> weights(const fs::path& run_dir) {
  torch::nn::AnyModule model =
      models::create_model(parse_config("model: {type: mlp, hidden: [16]}\n", "w").model, {1, 4});
  load_checkpoint(run_dir / "checkpoints/last.pt", *model.ptr(), nullptr, torch::kCPU);
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : model.ptr()->named_parameters()) out[p.key()] = p.value().detach().clone();
  return out;
}

// The "final test: ..." line of the summary.
std::string final_test_line(const std::string& log) {
  const auto at = log.find("final test:");
  return at == std::string::npos ? "" : log.substr(at, log.find('\n', at) - at);
}

// No batch normalisation (mlp), no augmentation, no dropout: the gradient of a global batch is the
// same however it is split, so two ranks with half batches must end where one process ends.
// Tolerance: 2e-5 absolute after 8 SGD steps (float32 sums in another order differ by ~1e-7/step).
void write_recipe(const TempDir& dir) {
  std::ofstream(dir / "r.yaml") << fmt::format(R"(run: {{dir: "{}", device: cpu, threads: 1}}
data:
  type: synthetic
  synthetic: {{train_samples: 64, test_samples: 40, height: 8, width: 8, channels: 1}}
  num_classes: 4
  batch_size: 16
  eval_batch_size: 8
  workers: 0
  mean: [0.5]
  std: [0.25]
model: {{type: mlp, hidden: [16]}}
optimizer: {{lr: 0.1, lr_reference_batch: 16}}
train: {{epochs: 2, log_every_steps: 1}}
checkpoint: {{save_best: false}}
)",
                                               (dir / "runs").string());
}

TEST(DistributedTrainer, TwoGlooRanksWithHalfBatchesMatchOneProcess) {
  TempDir dir;
  write_recipe(dir);
  const Ranks one = train(dir, "one", 1, {});
  ASSERT_EQ(one.exit_codes[0], 0) << one.logs[0];
  const Ranks two = train(dir, "two", 2, {"data.batch_size=8"});
  for (int r = 0; r < 2; ++r) ASSERT_EQ(two.exit_codes[r], 0) << "rank " << r << ":\n" << two.logs[r];
  const Ranks accumulated = train(dir, "acc", 2, {"data.batch_size=4", "train.accumulate_steps=2"});
  for (int r = 0; r < 2; ++r) ASSERT_EQ(accumulated.exit_codes[r], 0) << "rank " << r << ":\n" << accumulated.logs[r];

  // Rank 0 alone wrote a run directory; rank 1 logged no info lines once it had joined.
  ASSERT_EQ(run_dirs(two.run_root).size(), 1u);
  ASSERT_EQ(run_dirs(accumulated.run_root).size(), 1u);
  EXPECT_CONTAINS(two.logs[0], "distributed: rank 0 of 2 (torchrun, gloo backend");
  EXPECT_CONTAINS(two.logs[0], "---- summary ----");
  EXPECT_EQ(two.logs[1].find("---- summary ----"), std::string::npos) << two.logs[1];
  EXPECT_EQ(two.logs[1].find("distributed: rank 1"), std::string::npos) << two.logs[1];

  const auto expected = weights(run_dirs(one.run_root).front());
  for (const Ranks* run : {&two, &accumulated}) {
    const auto got = weights(run_dirs(run->run_root).front());
    for (const auto& [name, w] : expected) {
      const double diff = (got.at(name) - w).abs().max().item<double>();
      EXPECT_LT(diff, 2e-5) << name << " differs by " << diff << " in run " << run->run_root.filename();
    }
    // Sharded evaluation, sums all-reduced: the same numbers over all 40 test samples.
    EXPECT_EQ(final_test_line(run->logs[0]), final_test_line(one.logs[0]));
    EXPECT_CONTAINS(final_test_line(run->logs[0]), "(40 samples)");
  }
}

// A rank killed mid-run: the other stops at its next all-reduce, with an error that says so, well
// before the process group's 5-minute time-out.
TEST(DistributedTrainer, KillingOneRankEndsTheOtherWithAClearError) {
  TempDir dir;
  write_recipe(dir);
  const std::string port = std::to_string(free_port());
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    const std::map<std::string, std::string> env = {{"RANK", std::to_string(r)}, {"WORLD_SIZE", "2"},
                                                    {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}};
    pids.push_back(start_trainer({"--config", (dir / "r.yaml").string(), "--set", "train.epochs=100000"}, env,
                                 dir / fmt::format("rank{}.log", r)));
  }
  // Rank 0's metrics show that training runs.
  bool training = false;
  for (int i = 0; i < 600 && !training; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    for (const fs::path& run : run_dirs(dir / "runs/run")) {
      training = training || (fs::exists(run / "metrics.jsonl") && fs::file_size(run / "metrics.jsonl") > 0);
    }
  }
  ::kill(pids[1], SIGKILL);
  ::waitpid(pids[1], nullptr, 0);
  const auto killed = std::chrono::steady_clock::now();
  const int code = wait_until(pids[0], killed + std::chrono::seconds(60));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  const std::string log = testing::read_bytes(dir / "rank0.log");
  ASSERT_TRUE(training) << log;
  EXPECT_EQ(code, 1) << log;
  EXPECT_LT(seconds, 30.0);
  EXPECT_CONTAINS(log, "error: ");
  EXPECT_CONTAINS(log, "another rank has probably stopped or died first");
}

}  // namespace
}  // namespace stoker
