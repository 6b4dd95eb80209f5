// Processes for the distributed tests (distributed_procs.h).
#include "recipe/distributed_procs.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "models/registry.h"
#include "trainer/checkpoint.h"
#include "recipe/config.h"

extern char** environ;

namespace stoker::testing {
namespace fs = std::filesystem;

pid_t start_process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& extra,
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
  std::vector<std::string> args = argv;
  std::vector<char*> cargv, cenv;
  for (auto& a : args) cargv.push_back(a.data());
  for (auto& e : env) cenv.push_back(e.data());
  cargv.push_back(nullptr);
  cenv.push_back(nullptr);
  const std::string log_path = log.string();
  const pid_t pid = fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execve(cargv[0], cargv.data(), cenv.data());
    _exit(127);
  }
  return pid;
}

pid_t start_trainer(const std::vector<std::string>& args, const std::map<std::string, std::string>& extra,
                    const fs::path& log) {
  std::vector<std::string> argv = {STOKER_TRAINER_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  return start_process(argv, extra, log);
}

std::map<std::string, std::string> launcher_env(int rank, int world, const std::string& port) {
  return {{"RANK", std::to_string(rank)}, {"LOCAL_RANK", std::to_string(rank)}, {"WORLD_SIZE", std::to_string(world)},
          {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}};
}

int wait_until(pid_t pid, std::chrono::steady_clock::time_point deadline) {
  int status = 0;
  bool terminated = false;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    const auto now = std::chrono::steady_clock::now();
    if (now > deadline + std::chrono::seconds(15)) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    if (now > deadline && !terminated) {
      ::kill(pid, SIGTERM);
      terminated = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (terminated) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

Reaper::~Reaper() {
  for (const pid_t pid : pids_) {
    if (::waitpid(pid, nullptr, WNOHANG) == 0) wait_until(pid, std::chrono::steady_clock::now());
  }
}

std::vector<fs::path> run_dirs(const fs::path& root) {
  std::vector<fs::path> out;
  if (fs::exists(root)) {
    for (const auto& e : fs::directory_iterator(root)) out.push_back(e.path());
  }
  return out;
}

bool wait_for_metrics(const fs::path& root, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    for (const fs::path& run : run_dirs(root)) {
      if (fs::exists(run / "metrics.jsonl") && fs::file_size(run / "metrics.jsonl") > 0) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::map<std::string, torch::Tensor> recipe_weights(const fs::path& checkpoint) {
  torch::nn::AnyModule model =
      models::create_model(parse_config("model: {type: mlp, hidden: [16]}\n", "w").model, {1, 4});
  load_checkpoint(checkpoint, *model.ptr(), nullptr, torch::kCPU);
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : model.ptr()->named_parameters()) out[p.key()] = p.value().detach().clone();
  return out;
}

std::map<std::string, torch::Tensor> model_tensors(const fs::path& checkpoint) {
  torch::serialize::InputArchive archive;
  archive.load_from(checkpoint.string());
  std::map<std::string, torch::Tensor> out;
  for (const std::string& key : archive.keys()) {
    if (key.rfind("model.", 0) != 0) continue;
    torch::Tensor t;
    archive.read(key, t);
    out[key] = t.to(torch::kFloat64);
  }
  return out;
}

int64_t checkpoint_step(const fs::path& checkpoint) {
  torch::nn::AnyModule model =
      models::create_model(parse_config("model: {type: mlp, hidden: [16]}\n", "w").model, {1, 4});
  return load_checkpoint(checkpoint, *model.ptr(), nullptr, torch::kCPU).state.step;
}

double max_difference(const std::map<std::string, torch::Tensor>& a, const std::map<std::string, torch::Tensor>& b) {
  double most = 0;
  for (const auto& [name, w] : a) most = std::max(most, (b.at(name) - w).abs().max().item<double>());
  return most;
}

std::map<int64_t, uint64_t> sample_digests(const std::vector<std::string>& logs) {
  const std::string marker = "samples of step ";
  std::map<int64_t, uint64_t> digests;
  for (const auto& log : logs) {
    for (size_t at = log.find(marker); at != std::string::npos; at = log.find(marker, at + 1)) {
      const int64_t step = std::stoll(log.substr(at + marker.size()));
      const size_t hex = log.find("digest ", at) + 7;
      digests[step] ^= std::stoull(log.substr(hex, 16), nullptr, 16);
    }
  }
  return digests;
}

std::string final_test_line(const std::string& log) {
  const auto at = log.find("final test:");
  return at == std::string::npos ? "" : log.substr(at, log.find('\n', at) - at);
}

void write_dist_recipe(const fs::path& dir) {
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

}  // namespace stoker::testing
