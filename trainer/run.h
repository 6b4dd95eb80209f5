// A whole training run from a Config: device and threads, data, model, the run directory (resolved
// config, log, metrics, checkpoints), the Trainer with its callbacks, resume, and the summary.
// This is what `trainer --config ...` does; applications can call it too.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include <torch/nn/modules/container/any.h>
#include <torch/types.h>

#include "common/error.h"
#include "data/loader.h"
#include "trainer/config.h"
#include "trainer/trainer.h"

namespace stoker {

struct TrainRequest {
  Config config;
  // A run directory or a checkpoint file to continue. `config` is compared with the config saved in
  // the checkpoint: every difference is logged, and one that breaks exactness (see
  // ConfigDifference) is refused with a stoker::Error listing them unless `allow_config_change`.
  std::optional<std::filesystem::path> resume;
  bool allow_config_change = false;
  bool live_progress = false;                   // a redrawn bar (terminals) or plain lines
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

// "auto" picks CUDA when available, else the CPU; "cuda"/"cuda:N" without CUDA is an error.
torch::Device resolve_device(const std::string& name);

// Sets libtorch's intra-op thread count and a single inter-op thread. `threads` = 0 picks one per
// core, less the loader's workers when training on the CPU, so that the two do not oversubscribe it.
void configure_threads(int64_t threads, int64_t loader_workers = 0, bool on_cpu = true);

// The configured model (model.*, data.num_classes) for inputs of `in_channels` channels, on the CPU.
torch::nn::AnyModule make_model(const Config& config, int64_t in_channels);

// One split ("train" or "test") of the configured data set (data.type and its keys, data.root, the
// split's limit), checked against data.num_classes.
std::shared_ptr<data::Dataset> make_dataset(const Config& config, const std::string& split);
// The loader of one split over `dataset` (which may wrap make_dataset's, e.g. in a cache): the
// split's batch size, shuffling and transforms, and the rest of data.*.
// `output_uint8` hands out the uint8 batches as built (see data::LoaderOptions).
std::shared_ptr<data::Loader> make_loader(const Config& config, std::shared_ptr<data::Dataset> dataset,
                                          torch::Device device, const std::string& split,
                                          bool output_uint8 = false);
// The same over make_dataset(config, split).
std::shared_ptr<data::Loader> make_loader(const Config& config, torch::Device device,
                                          const std::string& split, bool output_uint8 = false);
// The training and test loaders of the configured data set.
struct Loaders {
  std::shared_ptr<data::Loader> train, test;
  int64_t in_channels = 1;
};
Loaders make_loaders(const Config& config, torch::Device device);
// The same with the training split already made (make_dataset).
Loaders make_loaders(const Config& config, torch::Device device, std::shared_ptr<data::Dataset> train);
// The shape the training loader's batches will have (channels, height, width; height and width 0
// when the transforms do not end at one size), without building the loader.
data::InputShape input_shape(const Config& config, std::shared_ptr<data::Dataset> train);

// Step-time benchmark: the recipe's model, optimizer and precision trained on one batch of its data
// that is already on the device, so that only the training step is timed (forward, backward,
// optimizer; replayed as a CUDA graph with train.cuda_graph). `warmup` untimed steps come first
// (a CUDA graph is captured during them).
struct StepBenchResult {
  int64_t steps = 0;
  int64_t batch_size = 0;
  double seconds = 0;
  double ms_per_step = 0;
  double samples_per_s = 0;
  bool graph = false;  // the timed steps were graph replays
  std::string device;
  Precision precision = Precision::kFp32;  // as trained (train.precision: auto resolved)
  std::string hardware;                    // the device's features (HardwareFeatures::summary)
};
StepBenchResult bench_train_step(const Config& config, int64_t steps, int64_t warmup = 10);

// Creates `<run.dir>/<run.name>/<timestamp>/` (never reusing an existing folder) and checks that
// it is writable.
std::filesystem::path create_run_dir(const RunOptions& run);

}  // namespace stoker
