// A whole training run from a Config: device and threads, data, model, the run directory (resolved
// config, log, metrics, checkpoints), the Trainer with its callbacks, resume, and the summary.
// This is what `trainer --config ...` does; applications can call it too.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <torch/nn/modules/container/any.h>
#include <torch/types.h>

#include "common/error.h"
#include "data/loader.h"
#include "distributed/process_group.h"
#include "recipe/config.h"
#include "recipe/run_plan.h"
#include "trainer/trainer.h"

namespace stoker {

// What data.autotune: start did before the first epoch (TrainRequest::autotune).
struct AutotuneOutcome {
  Config config;            // the run's config with the tuned loader settings
  std::string line;         // before and after, in one line, for the log
  std::string doctor_json;  // the run directory's doctor.json (what `trainer report` shows)
};

struct TrainRequest {
  Config config;
  // A run directory or a checkpoint file to continue. `config` is compared with the config saved in
  // the checkpoint: every difference is logged, and one that breaks exactness (see
  // ConfigDifference) is refused with a stoker::Error listing them unless `allow_config_change`.
  std::optional<std::filesystem::path> resume;
  bool allow_config_change = false;
  bool live_progress = false;                   // a redrawn bar (terminals) or plain lines
  // How `config` was made (parse_config's notes: keys a --set type switch dropped), logged once the
  // run's log file is open, so that train.log holds them too.
  std::vector<std::string> config_notes;
  // data.autotune: start, called once before a new run's first epoch with its resolved plan (a resumed
  // run keeps the values its saved config holds instead). recipe/ cannot call the doctor, which comes
  // after it: programs that link the doctor set it to stoker::autotune_at_start (doctor/autotune.h),
  // as `trainer` does; a run asking for autotune without it is an error.
  std::function<AutotuneOutcome(const RunPlan&)> autotune;
  // Under a launcher: the process group's options (its timeout; bench/dist_sync_bench.cpp compares
  // the gradient-sync variants with them).
  distributed::ProcessGroupOptions process_group;
};

struct TrainOutcome {
  std::filesystem::path run_dir;
  FitResult fit;
  TrainState state;  // where training stands at the end
  EvalResult final_test;  // the last evaluation (of this call, or of the checkpoint resumed from)
  EvalResult final_ema_test;  // the same with the EMA of the weights; samples == 0 without one
};

// Training diverged (train.on_nonfinite): the first inf/NaN step as the Trainer reported it, the last
// checkpoint of the run holding finite weights (none when nothing was saved yet) and a lower
// optimizer.lr to continue from it with.
class TrainingDiverged : public Error {
 public:
  TrainingDiverged(const std::string& message, std::optional<std::filesystem::path> last_good, int64_t last_good_step,
                   double lower_lr)
      : Error(message), last_good(std::move(last_good)), last_good_step(last_good_step), lower_lr(lower_lr) {}
  std::optional<std::filesystem::path> last_good;
  int64_t last_good_step = 0;
  double lower_lr = 0;  // optimizer.lr / 10
};

// Throws TrainingDiverged when the loss, gradients or weights become inf/NaN (train.on_nonfinite).
TrainOutcome run_training(const TrainRequest& request);

// Creates `<run.dir>/<run.name>/<timestamp>/` (never reusing an existing folder) and checks that
// it is writable.
std::filesystem::path create_run_dir(const RunOptions& run);

}  // namespace stoker
