// Runs the `trainer` program as a user would and checks exit codes and messages.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <torch/torch.h>
#include <torch/version.h>

#include "common/build_info.h"
#include "data/dataset.h"
#include "run_command.h"
#include "test_util.h"

namespace stoker {
namespace {
namespace fs = std::filesystem;
using stoker::testing::TempDir;

using Result = stoker::testing::CommandResult;
using stoker::testing::run_command;

Result run_trainer(const std::string& args) { return run_command(std::string(stoker::testing::trainer_bin()) + " " + args); }

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

// trainer --version (issue 41): what the build is, and whether its kernels run on this machine's GPU.
TEST(TrainerCli, VersionNamesTheBuildsCudaPartsNcclAndTheMachine) {
  const Result r = run_trainer("--version");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "stoker: ");
  EXPECT_CONTAINS(r.output, std::string("libtorch: ") + TORCH_VERSION);
#ifdef STOKER_WITH_CUDA
  EXPECT_CONTAINS(r.output, "cuda parts: yes (nvcc ");
  EXPECT_CONTAINS(r.output, "; kernels for ");
#else
  EXPECT_CONTAINS(r.output, "cuda parts: no");
#endif
  EXPECT_TRUE(r.output.find("nccl: yes (NCCL ") != std::string::npos || r.output.find("nccl: no") != std::string::npos)
      << r.output;
  EXPECT_CONTAINS(r.output, torch::cuda::is_available() ? "machine: " : "machine: no CUDA device");
}

// Which GPUs a build's kernels run on: machine code for exactly its architecture, or PTX for it or an older one.
TEST(TrainerCli, KernelsRunOnTheArchitecturesBuiltOrANewerOneThroughPtx) {
  const std::string archs = "75-real,80-real,86-real,90-real,100-real,120";
  EXPECT_TRUE(kernels_run_on(archs, 90));
  EXPECT_TRUE(kernels_run_on(archs, 121));   // the PTX of sm_120, compiled by the driver
  EXPECT_FALSE(kernels_run_on(archs, 89));   // no machine code for 8.9, and the PTX is of 12.0
  EXPECT_FALSE(kernels_run_on("90-real", 100));
  EXPECT_TRUE(kernels_run_on("80-virtual;90-real", 89));
  EXPECT_FALSE(kernels_run_on("", 90));
}

TEST(TrainerCli, BadCommandLineShowsUsage) {
  Result r = run_trainer("");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("train needs --config FILE"), std::string::npos) << r.output;
  r = run_trainer("--config a.yaml --frobnicate");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("unknown argument '--frobnicate'"), std::string::npos) << r.output;
}

// A usage error is one line saying what is wrong, then where to read what is right.
void expect_usage_error(const std::string& args, const std::string& message, const std::string& subcommand) {
  const Result r = run_trainer(args);
  EXPECT_EQ(r.exit_code, 2) << "trainer " << args << "\n" << r.output;
  const std::string help = subcommand.empty() ? "trainer --help" : "trainer " + subcommand + " --help";
  EXPECT_EQ(r.output, "trainer: " + message + "\nRun '" + help + "' for usage.\n") << "trainer " << args;
}

TEST(TrainerCli, AFlagOfAnotherSubcommandNamesTheSubcommandsThatTakeIt) {
  expect_usage_error("train --steps 5", "--steps is not an option of 'train'; it belongs to: bench-step, doctor", "train");
  // Reported before the missing --config, and the same with --flag=value and the default subcommand.
  expect_usage_error("--config a.yaml --steps=5", "--steps is not an option of 'train'; it belongs to: bench-step, doctor",
                     "train");
  expect_usage_error("bench-data --config a.yaml --checkpoint c.pt",
                     "--checkpoint is not an option of 'bench-data'; it belongs to: eval, predict, export", "bench-data");
  expect_usage_error("predict --checkpoint c.pt --print-config x.png",
                     "--print-config is not an option of 'predict'; it belongs to: train, bench-data, bench-step, eval, doctor",
                     "predict");
  expect_usage_error("eval --config a.yaml --checkpoint c.pt --top 3",
                     "--top is not an option of 'eval'; it belongs to: predict", "eval");
}

TEST(TrainerCli, AnUnknownFlagListsTheFlagsOfTheSubcommand) {
  expect_usage_error("bench-step --config a.yaml --frobnicate=2",
                     "unknown argument '--frobnicate=2'; 'bench-step' takes: -h/--help, --config, --set, "
                     "--print-config, --steps",
                     "bench-step");
  expect_usage_error("eval --config a.yaml -x",
                     "unknown argument '-x'; 'eval' takes: -h/--help, --checkpoint, --config, --set, --print-config",
                     "eval");
  expect_usage_error("frobnicate --config a.yaml",
                     "unknown subcommand 'frobnicate'; the subcommands are: train, bench-data, bench-step, eval, predict, doctor, report, export, pack",
                     "");
  expect_usage_error("train extra --config a.yaml", "unexpected argument 'extra' for 'train'", "train");
}

TEST(TrainerCli, MissingAndBadValuesNameTheFlag) {
  expect_usage_error("--config", "--config needs a value (FILE)", "train");
  expect_usage_error("bench-step --config a.yaml --steps", "--steps needs a value (N)", "bench-step");
  expect_usage_error("--config a.yaml --set", "--set needs a value (KEY.PATH=VALUE)", "train");
  expect_usage_error("bench-step --config a.yaml --steps 0", "--steps takes a positive whole number, not '0'",
                     "bench-step");
  expect_usage_error("bench-data --config a.yaml --batches=2.5", "--batches takes a positive whole number, not '2.5'",
                     "bench-data");
  expect_usage_error("predict --checkpoint c.pt --top -1 x.png", "--top takes a positive whole number, not '-1'",
                     "predict");
  expect_usage_error("bench-data --config a.yaml --split val", "--split takes train or test, not 'val'", "bench-data");
  expect_usage_error("bench-data --config a.yaml --output f16", "--output takes float or uint8, not 'f16'",
                     "bench-data");
  expect_usage_error("--config a.yaml --progress fancy", "--progress takes auto, bar or lines, not 'fancy'", "train");
  expect_usage_error("bench-data", "bench-data needs --config FILE", "bench-data");
}

TEST(TrainerCli, HelpOverallAndPerSubcommand) {
  Result r = run_trainer("--help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* line : {"  train ", "  bench-data ", "  bench-step ", "  eval ", "  predict ", "exit status: 0 done"}) {
    EXPECT_CONTAINS(r.output, line);
  }
  EXPECT_EQ(run_trainer("-h").output, r.output);

  r = run_trainer("bench-data --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "Usage: trainer bench-data [OPTIONS]");
  for (const char* flag : {"--config FILE", "--set KEY.PATH=VALUE", "--batches N", "--split train|test", "--output"}) {
    EXPECT_CONTAINS(r.output, flag);
  }
  EXPECT_EQ(r.output.find("--steps"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("--checkpoint"), std::string::npos) << r.output;

  r = run_trainer("predict -h");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "Usage: trainer predict [OPTIONS] IMAGE...");
  EXPECT_CONTAINS(r.output, "--top K");
  EXPECT_CONTAINS(r.output, "--ema");
  // Help wins over what else is wrong; with no subcommand named, it is train's.
  r = run_trainer("--config a.yaml --steps 5 --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "Usage: trainer train [OPTIONS]");
  EXPECT_CONTAINS(r.output, "--resume RUN");
}

TEST(TrainerCli, ReportWritesThePageOrSaysWhatIsMissing) {
  TempDir dir;
  fs::create_directories(dir / "run");
  write_text(dir / "run/metrics.jsonl", "{\"kind\":\"step\",\"step\":1,\"loss\":2}\n{\"kind\":\"step\",\"step\":2,\"loss\":1}\n");
  Result r = run_trainer("report " + (dir / "run").string() + " --output " + (dir / "r.html").string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "wrote " + (dir / "r.html").string());
  EXPECT_CONTAINS(testing::read_bytes(dir / "r.html"), "<svg");
  r = run_trainer("report " + dir.path().string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, "holds no metrics.jsonl");
  expect_usage_error("report", "report needs the run directory (runs/<name>/<time>)", "report");
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
  EXPECT_EQ(r.output.find("[check"), std::string::npos) << r.output;  // the source location is for the log file
}

TEST(TrainerCli, PrintConfigShowsTheResolvedValues) {
  const Result r = run_trainer(std::string("--config ") + STOKER_SOURCE_DIR +
                               "/configs/fashion_mnist.yaml --set optimizer.lr=0.03 --print-config");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("optimizer:\n  type: sgd\n  momentum: 0.9\n  nesterov: true\n  lr: 0.03\n"), std::string::npos) << r.output;
}

// A registered type switched on the command line: the recipe's keys of the old type are dropped and
// named (as a comment above the printed config, which stays a valid recipe); a key of the old type
// given on the command line is an error; a whole section may be given as a mapping.
TEST(TrainerCli, SetSwitchesARegisteredType) {
  const std::string recipe = std::string(STOKER_SOURCE_DIR) + "/configs/fashion_mnist.yaml";
  Result r = run_trainer("--config " + recipe + " --set optimizer.type=adamw --print-config");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "# optimizer.type: adamw (was sgd in " + recipe +
                                "): dropped the keys adamw does not have: momentum, nesterov\n");
  EXPECT_CONTAINS(r.output, "optimizer:\n  type: adamw\n  betas: [0.9, 0.999]\n  eps: 1e-08\n  lr: 0.2\n");
  EXPECT_EQ(r.output.find("momentum:"), std::string::npos) << r.output;

  r = run_trainer("--config " + recipe + " --set optimizer.type=adamw --set optimizer.momentum=0.9 --print-config");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, "error: --set optimizer.momentum: optimizer type 'adamw' has no key 'momentum'; it takes:");

  r = run_trainer("--config " + recipe + " --set 'optimizer={type: adamw, lr: 0.002}' --print-config");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "# optimizer: the whole section from --set; dropped the keys " + recipe +
                                " gave it: type, lr, momentum, nesterov, weight_decay (keys not given take their "
                                "defaults)\n");
  EXPECT_CONTAINS(r.output, "  lr: 0.002\n  weight_decay: 0.0005\n");

  r = run_trainer("--config " + recipe + " --set train.epoch=3 --print-config");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, "error: --set train.epoch: unknown key; did you mean epochs?\n");
}

TEST(TrainerCli, PrintConfigWithTheFlagFormsAndSubcommands) {
  const std::string recipe = std::string(STOKER_SOURCE_DIR) + "/configs/fashion_mnist.yaml";
  // --flag=value, --set repeated (the last value of a key wins), the default subcommand or a named one.
  for (const std::string command : {"", "train ", "bench-data ", "bench-step "}) {
    const Result r = run_trainer(command + "--config=" + recipe + " --set=optimizer.lr=0.5 --set optimizer.lr=0.03" +
                                 " --set train.epochs=2 --print-config");
    EXPECT_EQ(r.exit_code, 0) << command << r.output;
    EXPECT_CONTAINS(r.output, "optimizer:\n  type: sgd\n  momentum: 0.9\n  nesterov: true\n  lr: 0.03\n");
    EXPECT_CONTAINS(r.output, "\n  epochs: 2\n");
  }
  // Given twice, the last --config counts.
  const Result r = run_trainer("--config /nonexistent/x.yaml --config " + recipe + " --print-config");
  EXPECT_EQ(r.exit_code, 0) << r.output;
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
                               std::to_string(stopped_epoch + 1) + " --resume " + run_dir.string() +
                               " --allow-config-change");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resuming " + (run_dir / "checkpoints/last.pt").string()), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(fmt::format("epochs done:     {0} of {0} ({1} optimizer steps)", stopped_epoch + 1,
                                      (stopped_epoch + 1) * 64)),
            std::string::npos)
      << r.output;
}

// Starts the trainer with `args` in the background and sends it `sig` once its first metrics line
// is written; returns its exit status and output, and the run directory.
Result signal_after_first_metrics(const fs::path& dir, const std::vector<std::string>& args, int sig, fs::path& run_dir) {
  const std::string log = (dir / "signalled.txt").string();
  const pid_t child = fork();
  if (child == 0) {
    std::vector<char*> argv{const_cast<char*>(STOKER_TRAINER_BIN)};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    freopen(log.c_str(), "w", stdout);
    dup2(fileno(stdout), 2);
    execv(STOKER_TRAINER_BIN, argv.data());
    _exit(127);
  }
  for (int i = 0; i < 3000 && run_dir.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!fs::exists(dir / "runs/cli")) continue;
    for (const auto& e : fs::directory_iterator(dir / "runs/cli")) {
      if (fs::exists(e.path() / "metrics.jsonl") && fs::file_size(e.path() / "metrics.jsonl") > 0) run_dir = e.path();
    }
  }
  kill(child, sig);
  int status = 0;
  waitpid(child, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, stoker::testing::read_bytes(log)};
}

// Issue #12: resuming continued with the recipe's data and schedule instead of the run's --set
// values. Now `trainer --resume RUN` continues with the config saved in the checkpoint, and a
// config that would change the data or the schedule is refused unless --allow-config-change.
TEST(TrainerCli, SigintStopsAndResumeContinuesWithTheSavedConfig) {
  TempDir data;
  stoker::testing::write_synthetic_idx_dataset(data.path(), 2048, 64, 28);
  write_text(data / "r.yaml", tiny_recipe(data.path(), data / "runs", 40));
  fs::path run_dir;
  const Result stopped = signal_after_first_metrics(
      data.path(), {"--config", (data / "r.yaml").string(), "--set", "data.train_limit=1024", "--set", "train.epochs=3"},
      SIGINT, run_dir);
  ASSERT_FALSE(run_dir.empty()) << stopped.output;
  ASSERT_EQ(stopped.exit_code, 130) << stopped.output;
  EXPECT_CONTAINS(stopped.output, "continue with: " + std::string(STOKER_TRAINER_BIN) + " --resume " + run_dir.string() + "\n");

  // The printed command finishes the run as it was started: 1024 samples (32 steps) x 3 epochs.
  const Result resumed = run_trainer("--resume " + run_dir.string());
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_CONTAINS(resumed.output, "epochs done:     3 of 3 (96 optimizer steps)");

  const Result refused = run_trainer("--config " + (data / "r.yaml").string() + " --resume " + run_dir.string());
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_CONTAINS(refused.output, "data.train_limit (1024 -> 0)");
  EXPECT_CONTAINS(refused.output, "train.epochs (3 -> 40)");
  EXPECT_CONTAINS(refused.output, "--allow-config-change");

  const Result further = run_trainer("--resume " + run_dir.string() +
                                     " --set train.epochs=4 --set train.log_every_steps=7 --allow-config-change");
  EXPECT_EQ(further.exit_code, 0) << further.output;
  EXPECT_CONTAINS(further.output, "config change on resume: train.epochs: 3 -> 4 (breaks exactness)");
  EXPECT_CONTAINS(further.output, "config change on resume: train.log_every_steps: 5 -> 7\n");
  EXPECT_CONTAINS(further.output, "epochs done:     4 of 4 (128 optimizer steps)");
}

// ---- SIGINT mid-epoch, then --resume: exactly the uninterrupted run (issue #12) -------------------

void expect_archives_equal(torch::serialize::InputArchive& a, torch::serialize::InputArchive& b,
                           const std::string& where, const std::set<std::string>& skip, int& compared,
                           bool skip_param_addresses = false);

// libtorch's optimizer archive names each parameter's state by the address of the parameter in the
// process that wrote it ("state/<address>/exp_avg"); "param_groups/param_groups/<g>/params/<i>" (an
// archive per group) holds those addresses in order. Compared by position: each state renamed to "<g>/<i>".
std::map<std::string, std::string> parameter_positions(torch::serialize::InputArchive& groups) {
  std::map<std::string, std::string> position;
  static const std::regex group_key("param_groups/([0-9]+)"), param_key("params/([0-9]+)");
  std::smatch g, p;
  for (const std::string& key : groups.keys()) {
    torch::serialize::InputArchive group;
    if (!std::regex_match(key, g, group_key) || !groups.try_read(key, group)) continue;
    for (const std::string& entry : group.keys()) {
      c10::IValue address;
      if (!std::regex_match(entry, p, param_key) || !group.try_read(entry, address) || !address.isString()) continue;
      position[address.toStringRef()] = std::string(g[1]) + "/" + std::string(p[1]);
    }
  }
  return position;
}

void expect_optimizers_equal(torch::serialize::InputArchive& a, torch::serialize::InputArchive& b,
                             const std::string& where, int& compared) {
  torch::serialize::InputArchive groups_a, groups_b, state_a, state_b;
  ASSERT_TRUE(a.try_read("param_groups", groups_a) && b.try_read("param_groups", groups_b)) << where;
  const std::map<std::string, std::string> pos_a = parameter_positions(groups_a), pos_b = parameter_positions(groups_b);
  ASSERT_EQ(pos_a.size(), pos_b.size()) << where;
  ASSERT_GT(pos_a.size(), 0u) << where;
  // The groups' options and sizes; their "params/<i>" entries (addresses) are compared by position.
  expect_archives_equal(groups_a, groups_b, where + "param_groups/", {}, compared, /*skip_param_addresses=*/true);
  std::vector<std::string> rest_a = a.keys(), rest_b = b.keys();
  std::sort(rest_a.begin(), rest_a.end());
  std::sort(rest_b.begin(), rest_b.end());
  EXPECT_EQ(rest_a, rest_b) << where;
  if (!a.try_read("state", state_a)) return;  // no step taken yet
  ASSERT_TRUE(b.try_read("state", state_b)) << where;
  std::map<std::string, std::string> by_position_b;
  for (const std::string& address : state_b.keys()) by_position_b[pos_b.at(address)] = address;
  int states = 0;
  for (const std::string& address : state_a.keys()) {
    const std::string& position = pos_a.at(address);
    ASSERT_EQ(by_position_b.count(position), 1u) << where << "state of parameter " << position << " missing";
    torch::serialize::InputArchive sa, sb;
    ASSERT_TRUE(state_a.try_read(address, sa) && state_b.try_read(by_position_b[position], sb)) << where << position;
    expect_archives_equal(sa, sb, where + "state/" + position + "/", {}, compared);
    ++states;
  }
  EXPECT_EQ(static_cast<size_t>(states), state_b.keys().size()) << where;
  EXPECT_EQ(static_cast<size_t>(states), pos_a.size()) << where << "not every parameter has optimizer state";
}

// Every entry of two checkpoint archives (and of their nested ones: the optimizer, the loss scaler)
// compared exactly: tensors with torch::equal, values with ==. `skip` names keys left out.
void expect_archives_equal(torch::serialize::InputArchive& a, torch::serialize::InputArchive& b,
                           const std::string& where, const std::set<std::string>& skip, int& compared,
                           bool skip_param_addresses) {
  static const std::regex param_address("params/[0-9]+");
  std::vector<std::string> keys_a = a.keys(), keys_b = b.keys();
  std::sort(keys_a.begin(), keys_a.end());
  std::sort(keys_b.begin(), keys_b.end());
  EXPECT_EQ(keys_a, keys_b) << where;
  for (const std::string& key : keys_a) {
    if (skip.count(key) != 0 || std::find(keys_b.begin(), keys_b.end(), key) == keys_b.end()) continue;
    if (skip_param_addresses && std::regex_match(key, param_address)) continue;
    c10::IValue va, vb;
    ASSERT_TRUE(a.try_read(key, va)) << where << key;
    ASSERT_TRUE(b.try_read(key, vb)) << where << key;
    if (va.isObject()) {  // a nested archive
      torch::serialize::InputArchive na, nb;
      ASSERT_TRUE(a.try_read(key, na) && b.try_read(key, nb)) << where << key;
      if (key == "optimizer") {
        expect_optimizers_equal(na, nb, where + key + "/", compared);
      } else {
        expect_archives_equal(na, nb, where + key + "/", {}, compared, skip_param_addresses);
      }
      continue;
    }
    ++compared;
    if (va.isTensor() && vb.isTensor()) {
      const torch::Tensor ta = va.toTensor(), tb = vb.toTensor();
      EXPECT_TRUE(ta.scalar_type() == tb.scalar_type() && ta.sizes() == tb.sizes() && torch::equal(ta, tb))
          << where << key << " differs: max |a - b| = "
          << (ta.sizes() == tb.sizes() ? (ta.to(torch::kDouble) - tb.to(torch::kDouble)).abs().max().item<double>()
                                       : -1.0);
    } else if (va.isDouble() && vb.isDouble() && std::isnan(va.toDouble()) && std::isnan(vb.toDouble())) {
      // NaN (no best metric yet) on both sides
    } else {
      EXPECT_TRUE(va == vb) << where << key << " differs: " << va << " vs " << vb;
    }
  }
}

int compare_checkpoints(const fs::path& a, const fs::path& b) {
  torch::serialize::InputArchive archive_a, archive_b;
  archive_a.load_from(a.string());
  archive_b.load_from(b.string());
  int compared = 0;
  // "config" is the resolved config, which names each run's own directory (run.dir).
  expect_archives_equal(archive_a, archive_b, a.string() + " vs " + b.string() + ": ", {"config"}, compared);
  return compared;
}

// The "epoch" and "step" of the last complete step line of a metrics.jsonl; {-1, -1} when none.
std::pair<int64_t, int64_t> last_logged_step(const fs::path& metrics) {
  std::pair<int64_t, int64_t> last{-1, -1};
  if (!fs::exists(metrics)) return last;
  std::string text = stoker::testing::read_bytes(metrics);
  text = text.substr(0, text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n'));  // complete lines only
  static const std::regex step_line(R"re("kind":"step","epoch":([0-9]+),"step":([0-9]+))re");
  for (std::sregex_iterator it(text.begin(), text.end(), step_line), end; it != end; ++it) {
    last = {std::stoll((*it)[1]), std::stoll((*it)[2])};
  }
  return last;
}

// Issue #12: SIGINT (Ctrl-C) in the middle of an epoch, after a periodic mid-epoch checkpoint, then
// `trainer --resume RUN`, ends with exactly the weights, optimizer state (AdamW), loss-scaler state
// (fp16-mixed), EMA, RNG and counters of the same run left alone: torch::equal on every tensor of
// the final checkpoints, on the CPU with one intra-op thread, two loader workers and random
// augmentation and dropout. So does resuming from the periodic mid-epoch checkpoint written before
// the signal (a copy of the run directory taken then, as a crash would leave it).
TEST(TrainerCliSignals, SigintMidEpochThenResumeEqualsTheUninterruptedRunExactly) {
  TempDir data;
  constexpr int64_t kBatches = 16;  // 512 samples / 32 per batch (drop_last)
  constexpr int64_t kEvery = 4;     // a checkpoint every 4 steps: steps 4, 8, 12 of each epoch
  constexpr int64_t kEpochs = 3;
  stoker::testing::write_synthetic_idx_dataset(data.path(), 512, 64, 12);
  // fp16-mixed on the CPU: autocast to float16 and the dynamic loss scaler (optim/grad_scaler.h),
  // started high and grown every 3 steps so that it both skips overflowing steps and grows: its
  // scale and growth tracker change the weights when they are not restored.
  write_text(data / "r.yaml", fmt::format(R"(run: {{name: exact, dir: "{}", device: cpu, threads: 1, seed: 7}}
data:
  root: "{}"
  batch_size: 32
  eval_batch_size: 64
  drop_last: true
  workers: 2
  train_transforms: [{{type: random_crop, size: 12, padding: 2}}, {{type: horizontal_flip, p: 0.5}}]
  mean: [0.5]
  std: [0.3]
model: {{widths: [8, 16], blocks: [1, 1], dropout: 0.2}}
optimizer: {{type: adamw, lr: 0.003, weight_decay: 0.05}}
schedule: {{type: cosine, warmup_epochs: 0.5}}
train:
  epochs: {}
  log_every_steps: 1
  precision: fp16-mixed
  loss_scale: {{init_scale: 1.0e+9, growth_interval: 3}}
  ema_decay: 0.9
checkpoint: {{every_steps: {}, save_best: false}}
)",
                                          (data / "runs").string(), data.path().string(), kEpochs, kEvery));
  const std::string config = (data / "r.yaml").string();

  // The run left alone.
  const Result whole = run_trainer("--config " + config + " --set run.name=whole");
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  EXPECT_CONTAINS(whole.output, fmt::format("({} optimizer steps)", kEpochs * kBatches));
  fs::path whole_dir;
  for (const auto& e : fs::directory_iterator(data / "runs/whole")) whole_dir = e.path();
  const fs::path whole_last = whole_dir / "checkpoints/last.pt";
  ASSERT_TRUE(fs::is_regular_file(whole_last));
  {  // the loss scaler did skip overflowing steps: its state matters to the weights
    torch::serialize::InputArchive archive, scaler;
    archive.load_from(whole_last.string());
    torch::Tensor skipped;
    ASSERT_TRUE(archive.try_read("part.loss_scaler", scaler) && scaler.try_read("skipped", skipped, true));
    EXPECT_GT(skipped.item<double>(), 0);
  }

  // The same run, frozen (SIGSTOP) now and then to look at its last logged step; once it is inside
  // the second or a later epoch, past that epoch's first periodic checkpoint and at least three
  // steps before its end, the run directory is copied as it is (its last.pt is that mid-epoch
  // checkpoint), SIGINT is sent and the run continues (SIGCONT) to stop at the next step boundary.
  // Where the signal lands does not depend on timing, only how many looks it takes.
  const std::string log = (data / "stopped.txt").string();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    freopen(log.c_str(), "w", stdout);
    dup2(fileno(stdout), 2);
    execl(stoker::testing::trainer_bin(), stoker::testing::trainer_bin(), "--config", config.c_str(), "--set",
          "run.name=stopped", (char*)nullptr);
    _exit(127);
  }
  fs::path run_dir;
  const fs::path copy_dir = data / "copy";
  std::pair<int64_t, int64_t> signalled_at{-1, -1};
  int status = 0;
  bool exited = false;
  while (signalled_at.first < 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    kill(child, SIGSTOP);
    if (waitpid(child, &status, WUNTRACED) != child || !WIFSTOPPED(status)) {
      exited = true;  // it ended before a look found it in place
      break;
    }
    if (run_dir.empty() && fs::exists(data / "runs/stopped")) {
      for (const auto& e : fs::directory_iterator(data / "runs/stopped")) run_dir = e.path();
    }
    if (!run_dir.empty()) {
      const auto [epoch, step] = last_logged_step(run_dir / "metrics.jsonl");
      const int64_t in_epoch = step - epoch * kBatches;  // steps done in this epoch
      if (epoch >= 1 && in_epoch > kEvery && in_epoch <= kBatches - 3) {
        fs::copy(run_dir, copy_dir, fs::copy_options::recursive);
        signalled_at = {epoch, step};
        kill(child, SIGINT);
      }
    }
    kill(child, SIGCONT);
  }
  if (!exited) ASSERT_EQ(waitpid(child, &status, 0), child);
  const std::string output = stoker::testing::read_bytes(log);
  ASSERT_GE(signalled_at.first, 0) << "the run ended before it was seen mid-epoch:\n" << output;
  ASSERT_TRUE(WIFEXITED(status)) << output;
  ASSERT_EQ(WEXITSTATUS(status), 130) << output;
  // It stopped at the step it was in (or the next), mid-epoch: "stopped at epoch E, batch B (step S)".
  std::smatch m;
  ASSERT_TRUE(std::regex_search(output, m, std::regex("stopped at epoch ([0-9]+), batch ([0-9]+) \\(step ([0-9]+)\\)")))
      << output;
  const int64_t stopped_epoch = std::stoll(m[1]), stopped_batch = std::stoll(m[2]), stopped_step = std::stoll(m[3]);
  EXPECT_EQ(stopped_epoch, signalled_at.first + 1) << output;
  EXPECT_GT(stopped_batch, kEvery) << output;
  EXPECT_LT(stopped_batch, kBatches) << output;
  EXPECT_TRUE(stopped_step == signalled_at.second || stopped_step == signalled_at.second + 1) << output;
  EXPECT_CONTAINS(output, "continue with: " + std::string(STOKER_TRAINER_BIN) + " --resume " + run_dir.string() + "\n");

  // The printed command finishes it; its final checkpoint is the uninterrupted run's.
  const Result resumed = run_trainer("--resume " + run_dir.string());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_CONTAINS(resumed.output, fmt::format("({} optimizer steps)", kEpochs * kBatches));
  const int compared = compare_checkpoints(whole_last, run_dir / "checkpoints/last.pt");
  EXPECT_GT(compared, 60);
  std::cout << "stopped at step " << stopped_step << " (epoch " << stopped_epoch << ", batch " << stopped_batch
            << "); " << compared << " checkpoint entries equal\n";

  // Resumed from the periodic mid-epoch checkpoint that was last.pt when the signal was sent.
  const fs::path copied_run = copy_dir;
  torch::serialize::InputArchive periodic;
  periodic.load_from((copied_run / "checkpoints/last.pt").string());
  c10::IValue batch_in_epoch;
  ASSERT_TRUE(periodic.try_read("state.batch_in_epoch", batch_in_epoch));
  EXPECT_GT(batch_in_epoch.toInt(), 0);
  EXPECT_LT(batch_in_epoch.toInt(), kBatches);
  EXPECT_EQ(batch_in_epoch.toInt() % kEvery, 0);
  const Result from_periodic = run_trainer("--resume " + copied_run.string());
  ASSERT_EQ(from_periodic.exit_code, 0) << from_periodic.output;
  EXPECT_GT(compare_checkpoints(whole_last, copied_run / "checkpoints/last.pt"), 20);
}

// Issue #12: `--set optimizer.lr=1e6` trained to the end with loss nan, saved NaN weights and
// exited 0. Now the run stops with exit status 1, names the step, and leaves only finite checkpoints.
TEST(TrainerCli, DivergenceStopsWithTheStepAndNoNanCheckpoint) {
  TempDir data;
  stoker::testing::write_synthetic_idx_dataset(data.path(), 640, 64, 12);
  write_text(data / "r.yaml", tiny_recipe(data.path(), data / "runs", 3));
  // Checkpoints every 2 steps, so that some are written before the loss becomes NaN (step 6 here).
  const Result r =
      run_trainer("--config " + (data / "r.yaml").string() + " --set optimizer.lr=1e6 --set checkpoint.every_steps=2");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, "the last good one is ");
  EXPECT_CONTAINS(r.output, "training diverged: ");
  EXPECT_TRUE(std::regex_search(r.output, std::regex("became inf or NaN at step [0-9]+ \\(epoch [0-9]+, batch [0-9]+\\) "
                                                     "with learning rate"))) << r.output;
  EXPECT_CONTAINS(r.output, "with a lower learning rate: " + std::string(STOKER_TRAINER_BIN) + " ");
  EXPECT_CONTAINS(r.output, "--set optimizer.lr=100000");
  int checked = 0;
  for (const auto& run : fs::directory_iterator(data / "runs/cli")) {
    for (const char* name : {"last.pt", "best.pt"}) {
      const fs::path checkpoint = run.path() / "checkpoints" / name;
      if (!fs::exists(checkpoint)) continue;
      const Result e = run_trainer("eval --config " + (data / "r.yaml").string() + " --checkpoint " + checkpoint.string());
      EXPECT_EQ(e.exit_code, 0) << e.output;
      EXPECT_EQ(e.output.find("nan"), std::string::npos) << checkpoint << ":\n" << e.output;
      ++checked;
    }
  }
  EXPECT_GE(checked, 1) << "no checkpoint was written before the divergence:\n" << r.output;
}

// ---- eval and predict, on one tiny run with an EMA --------------------------------------------------

class TrainerCliCheckpoints : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    stoker::testing::write_synthetic_idx_dataset(dir_->path(), 640, 100, 12);
    recipe_ = *dir_ / "r.yaml";
    write_text(recipe_, tiny_recipe(dir_->path(), *dir_ / "runs", 3));
    const Result r = run_trainer("--config " + recipe_.string() + " --set train.ema_decay=0.8");
    train_output_ = r.output;
    if (r.exit_code != 0) return;
    for (const auto& e : fs::directory_iterator(*dir_ / "runs/cli")) run_dir_ = e.path();
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override { ASSERT_FALSE(run_dir_.empty()) << "the training run failed:\n" << train_output_; }

  // The last "kind":"epoch" line of the run's metrics.jsonl.
  static std::string last_epoch_line() {
    std::ifstream in(run_dir_ / "metrics.jsonl");
    std::string last;
    for (std::string line; std::getline(in, line);) {
      if (line.find("\"kind\":\"epoch\"") != std::string::npos) last = line;
    }
    return last;
  }
  static double number_after(const std::string& text, const std::string& key) {
    const auto at = text.find("\"" + key + "\":");
    if (at == std::string::npos) return -1;
    return std::stod(text.substr(at + key.size() + 3));
  }

  static inline TempDir* dir_ = nullptr;
  static inline fs::path recipe_, run_dir_;
  static inline std::string train_output_;
};

// A finished run can be opened at once: its report.html (the loss and test curves drawn) and its
// TensorBoard events file are there, and the log says where.
TEST_F(TrainerCliCheckpoints, AFinishedRunHasItsReportAndTensorBoardFiles) {
  EXPECT_CONTAINS(train_output_, "report: " + (run_dir_ / "report.html").string());
  const std::string html = stoker::testing::read_bytes(run_dir_ / "report.html");
  EXPECT_CONTAINS(html, "<svg");
  EXPECT_CONTAINS(html, "test top-1");
  bool events = false;
  for (const auto& e : fs::directory_iterator(run_dir_ / "tb")) {
    events |= e.path().filename().string().rfind("events.out.tfevents.", 0) == 0 && fs::file_size(e.path()) > 0;
  }
  EXPECT_TRUE(events) << "no TensorBoard events file in " << (run_dir_ / "tb");
}

TEST_F(TrainerCliCheckpoints, EvalReportsTheRunsLastMetricsWithTop5AndEma) {
  const Result r = run_trainer("eval --config " + recipe_.string() + " --checkpoint " +
                               (run_dir_ / "checkpoints/last.pt").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "(3 epoch(s) done, step 60)");
  EXPECT_CONTAINS(r.output, "(100 samples)");
  EXPECT_CONTAINS(r.output, "EMA test   loss ");
  const auto json_at = r.output.find("{\"checkpoint\":");
  ASSERT_NE(json_at, std::string::npos) << r.output;
  const std::string json = r.output.substr(json_at, r.output.find('\n', json_at) - json_at);
  // The same weights on the same test split as the run's last evaluation.
  const std::string epoch = last_epoch_line();
  for (const char* key : {"test_loss", "test_top1", "test_top5", "ema_test_loss", "ema_test_top1", "ema_test_top5"}) {
    EXPECT_NEAR(number_after(json, key), number_after(epoch, key), 1e-6) << key << "\n" << json << "\n" << epoch;
  }
  EXPECT_GT(number_after(json, "test_top1"), 0.8);
  EXPECT_GE(number_after(json, "test_top5"), number_after(json, "test_top1"));

  // --set applies; a checkpoint of another model is refused with the reason.
  const Result other = run_trainer("eval --config " + recipe_.string() + " --set model.widths=[8,24] --checkpoint " +
                                   (run_dir_ / "checkpoints/last.pt").string());
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_CONTAINS(other.output, "but the model expects");
}

TEST_F(TrainerCliCheckpoints, PredictClassifiesImageFilesWithTheSavedConfig) {
  // Five test images, as PNG files, with their labels.
  data::DatasetOptions o;
  o.root = dir_->path().string();
  o.split = "test";
  const auto test = data::create_dataset(o);
  std::string args;
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < 5; ++i) {
    data::RawSample raw;
    test->read(i * 7, raw);
    const fs::path png = *dir_ / fmt::format("sample{}.png", i);
    stoker::testing::write_png(png, raw.image.height, raw.image.width, 1, raw.image.pixels);
    args += " " + png.string();
    labels.push_back(raw.label);
  }
  // No --config: the transforms, mean and std come from the checkpoint.
  for (const std::string ema : {"", " --ema"}) {
    const Result r = run_trainer("predict --checkpoint " + (run_dir_ / "checkpoints/last.pt").string() +
                                 " --top 3" + ema + args);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::regex line_re(R"((\S+sample(\d)\.png): (\d) \((0\.\d+|1\.0+)\), (\d) \((0\.\d+)\), (\d) \((0\.\d+)\))");
    int lines = 0, right = 0;
    std::istringstream in(r.output);
    for (std::string line; std::getline(in, line);) {
      std::smatch m;
      if (!std::regex_match(line, m, line_re)) continue;
      ++lines;
      const int sample = std::stoi(m[2]);
      right += std::stoi(m[3]) == labels[sample];
      EXPECT_GE(std::stod(m[4]), std::stod(m[6])) << line;
      EXPECT_GE(std::stod(m[6]), std::stod(m[8])) << line;
    }
    EXPECT_EQ(lines, 5) << r.output;
    EXPECT_GE(right, 4) << "labels " << fmt::format("{}", fmt::join(labels, " ")) << "\n" << r.output;
  }
}

TEST_F(TrainerCliCheckpoints, PredictErrorsNameTheFile) {
  const std::string checkpoint = (run_dir_ / "checkpoints/last.pt").string();
  Result r = run_trainer("predict --checkpoint " + checkpoint + " " + (*dir_ / "absent.png").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_CONTAINS(r.output, "cannot read image " + (*dir_ / "absent.png").string() + ": no such file");
  write_text(*dir_ / "notes.png", "not an image\n");
  r = run_trainer("predict --checkpoint " + checkpoint + " " + (*dir_ / "notes.png").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_CONTAINS(r.output, (*dir_ / "notes.png").string());
  r = run_trainer("predict --checkpoint " + checkpoint);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_CONTAINS(r.output, "predict needs one or more image files");
  r = run_trainer("eval --config " + recipe_.string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_CONTAINS(r.output, "eval needs --checkpoint RUN|FILE");
}

// Issue 19: on a CPU whose oneDNN has no bf16 path (capped here at AVX2, as an AVX2-only CPU is),
// `train.precision: auto` trains float32 and says why in its first lines, without timing bf16.
TEST(TrainerCli, AutoPrecisionOnACpuWithoutBf16SaysFp32AndWhy) {
  TempDir data;
  stoker::testing::write_synthetic_idx_dataset(data.path(), 64, 64, 8);
  write_text(data / "r.yaml", tiny_recipe(data.path(), data / "runs", 1));
  const Result r = run_command("env ONEDNN_MAX_CPU_ISA=AVX2 " + std::string(stoker::testing::trainer_bin()) +
                               " --config " + (data / "r.yaml").string() + " --set train.precision=auto");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "train.precision: auto -> fp32 (not timed: no oneDNN bf16 path on this CPU");
  EXPECT_CONTAINS(r.output, "ONEDNN_MAX_CPU_ISA=AVX2");
  EXPECT_LT(r.output.find("train.precision: auto"), r.output.find("epoch 1/1")) << "said before training";
}

}  // namespace
}  // namespace stoker
