// Processes for the distributed tests (tests/recipe/join_test.cpp and join_launch_test.cpp,
// tests/apps/shards_launch_test.cpp): the trainer program
// started as ranks, by hand (the launcher's variables set here) or under torchrun, waited for with
// deadlines, and killed when a test fails, so that no rank outlives its test or hangs CI.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <torch/types.h>

#include "test_util.h"

namespace stoker::testing {

// Starts `argv` (argv[0] a path) in a process group of its own, with this environment less any
// launcher's variables (RANK, WORLD_SIZE, MASTER_*, SLURM_*, TORCHELASTIC_*), plus `extra`; stdout
// and stderr go to `log`.
pid_t start_process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& extra,
                    const std::filesystem::path& log);
// The variables a launcher gives rank `rank` of `world` ranks meeting at 127.0.0.1:`port`.
std::map<std::string, std::string> launcher_env(int rank, int world, const std::string& port);
// The same for the trainer program: `args` follow its path.
pid_t start_trainer(const std::vector<std::string>& args, const std::map<std::string, std::string>& extra,
                    const std::filesystem::path& log);

// Waits for `pid` until `deadline`, then kills it (SIGTERM, and SIGKILL 15 s later: torchrun passes
// the SIGTERM on to its workers); its exit code, or -1 when it was killed or ended by a signal.
int wait_until(pid_t pid, std::chrono::steady_clock::time_point deadline);

// Kills, at the end of its scope, the processes it holds that are still running (an ASSERT that
// fails must not leave ranks behind).
class Reaper {
 public:
  explicit Reaper(std::vector<pid_t> pids = {}) : pids_(std::move(pids)) {}
  ~Reaper();
  void add(pid_t pid) { pids_.push_back(pid); }

 private:
  std::vector<pid_t> pids_;
};

// The run folders under `root` (<run.dir>/<run.name>).
std::vector<std::filesystem::path> run_dirs(const std::filesystem::path& root);
// Waits (at most `timeout`) until a run under `root` has written metrics, i.e. trains; false if none did.
bool wait_for_metrics(const std::filesystem::path& root, std::chrono::seconds timeout);

// The named parameters in `checkpoint` of the recipe's model (write_dist_recipe: mlp, hidden [16]).
std::map<std::string, torch::Tensor> recipe_weights(const std::filesystem::path& checkpoint);
// Every model tensor (parameters and buffers) in a checkpoint of any model, by name.
std::map<std::string, torch::Tensor> model_tensors(const std::filesystem::path& checkpoint);
// The optimizer steps taken when `checkpoint` (of the recipe's model) was saved.
int64_t checkpoint_step(const std::filesystem::path& checkpoint);
// The largest absolute difference between the same parameters of two such maps.
double max_difference(const std::map<std::string, torch::Tensor>& a, const std::map<std::string, torch::Tensor>& b);

// Step -> the digest of the optimizer step's samples, XORed over `logs` (one per rank), from the lines
// logging.sample_digests writes: "samples of step S (epoch E, batch B): digest X".
std::map<int64_t, uint64_t> sample_digests(const std::vector<std::string>& logs);

// The "final test: ..." line of a trainer log's summary ("" without one).
std::string final_test_line(const std::string& log);

// `dir`/r.yaml: a recipe of seconds whose runs go to `dir`/runs. No batch normalisation (mlp), no
// augmentation, no dropout: the gradient of a global batch is the same however it is split, so two
// ranks with half batches end where one process ends (to float32 rounding).
void write_dist_recipe(const std::filesystem::path& dir);

}  // namespace stoker::testing
