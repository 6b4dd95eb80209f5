// Stoker's configuration: one options struct per section, the YAML <-> struct mapping in one place
// (visit_config in config.cpp), and validation at load time. Unknown keys, wrong types and
// out-of-range values are rejected with the file, the key path, the line and what was expected:
//   configs/x.yaml: optimizer.lr at line 12: expected a positive number, got "fast"
// `--set key.path=value` overrides go through the same checks.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "common/options.h"
#include "data/dataset.h"
#include "data/settings.h"
#include "models/registry.h"
#include "optim/grad_scaler.h"
#include "optim/optim.h"
#include "optim/schedule.h"
#include "trainer/callbacks.h"
#include "trainer/nonfinite.h"
#include "trainer/precision.h"

namespace stoker {

struct RunOptions {
  std::string name = "run";     // run directory: <dir>/<name>/<timestamp>/
  std::string dir = "runs";
  uint64_t seed = 42;
  std::string device = "auto";  // auto | cpu | cuda | cuda:N
  int64_t threads = 0;          // libtorch intra-op threads; 0 = one per core
  // Data-parallel training over the processes a launcher started (torchrun, srun; see distributed/launch.h):
  // auto = on when the launcher's environment names a world size > 1; off = train alone regardless.
  std::string distributed = "auto";
};

// The data: section is the data layer's own settings struct (data/settings.h).
using DataOptions = data::DataSettings;



struct TrainOptions {
  int64_t epochs = 10;
  // fp32 | tf32 | bf16-mixed | fp16-mixed | bf16-true | auto. auto: chosen at start for the device from
  // its features and a few timed steps (trainer/precision_choice.h); a resumed run keeps its choice.
  Precision precision = Precision::kFp32;
  LossScaleOptions loss_scale;     // used by fp16-mixed
  // Gradient accumulation: one optimizer step every `accumulate_steps` batches, or, when
  // `effective_batch_size` is set, as many batches as make that many samples per optimizer step
  // (across all shards). See accumulate_steps_of().
  int64_t accumulate_steps = 1;
  int64_t effective_batch_size = 0;
  bool strict_sizes = false;     // batch/channel sizes that are not multiples of 8 are errors
  bool cuda_graph = false;       // capture the whole training step as one CUDA graph
  // cuDNN's autotuner (cudnn.benchmark): on CUDA, each convolution shape is timed once against the
  // algorithms cuDNN has and the fastest kept. Applied only when every batch has the same shape
  // (fixed-size data or transforms); with shapes that vary it would re-tune on every new shape.
  bool cudnn_benchmark = true;

  double label_smoothing = 0.0;
  double grad_clip_norm = 0.0;  // clip gradients to this global L2 norm; 0 = off
  bool channels_last = false;   // model and inputs in channels-last memory format
  int64_t log_every_steps = 50;
  // Exponential moving average of the weights, updated after every optimizer step and evaluated
  // after every epoch (optim/ema.h); 0 = off, e.g. 0.9998.
  double ema_decay = 0.0;
  bool ema_warmup = false;  // timm's EMA warm-up: decay min(ema_decay, 1 - (1 + updates)^(-2/3))
  EarlyStoppingOptions early_stopping;
  TraceOptions trace;
  // An inf/NaN loss or gradient: stop the run (no checkpoint after it, exit status 1) or skip the
  // step, up to max_nonfinite_skips steps in a row (trainer/nonfinite.h).
  OnNonfinite on_nonfinite = OnNonfinite::kStop;
  int64_t max_nonfinite_skips = 10;
};

// logging.mlflow: send the run to an MLflow tracking server (observe/mlflow.h).
struct MlflowLoggingOptions {
  std::string tracking_uri;  // http(s)://host:port of `mlflow server`; empty (the default): off
  std::string experiment;    // empty: run.name; created when the server has none of that name
  std::string run_name;      // empty: <run.name>/<timestamp>, as the run directory is named
};

// What a run records beyond metrics.jsonl and the log (README "Watching a run").
struct LoggingOptions {
  bool tensorboard = true;            // event files in <run>/tb/ (trainer/tensorboard.h)
  bool telemetry = true;              // GPU telemetry from NVML (trainer/telemetry.h); CUDA only
  double telemetry_interval_s = 1.0;  // seconds between NVML samples (averaged per logged step)
  bool flops = true;                  // count the model's FLOPs at start: TFLOP/s and MFU (models/flops.h)
  // Every rank logs, per optimizer step, a digest of the samples it trained on and their augmentation
  // seeds (XOR over ranks: the global step's), to check that runs on different numbers of processes
  // or workers saw the same batches. Non-zero ranks then log at info level too.
  bool sample_digests = false;
  MlflowLoggingOptions mlflow;
};

struct Config {
  RunOptions run;
  DataOptions data;
  // model.type and that type's own keys beside it (compact_resnet: widths, blocks, dropout).
  TypedOptions model = models::model_options("compact_resnet");
  OptimizerOptions optimizer;
  ScheduleOptions schedule;
  TrainOptions train;
  CheckpointOptions checkpoint;
  LoggingOptions logging;
};

// Batches per optimizer step: train.accumulate_steps, or derived from train.effective_batch_size
// (which must be a multiple of data.batch_size * data.shard_count).
// `world_size`: the data-parallel ranks (the process group's; 1 alone). A run shards its data over
// them, or over data.shard_count when sharded by hand; shards_of says which.
int64_t shards_of(const Config& config, int64_t world_size = 1);
int64_t accumulate_steps_of(const Config& config, int64_t world_size = 1);
// Samples per optimizer step over all processes: data.batch_size * data.shard_count * the batches
// accumulated into each step (train.accumulate_steps or train.effective_batch_size).
int64_t global_batch_size(const Config& config, int64_t world_size = 1);
// optimizer.lr, scaled by global_batch_size / optimizer.lr_reference_batch when that is set (the
// linear scaling rule of Goyal et al., 2017); optimizer.lr itself when it is 0.
double effective_lr(const Config& config, int64_t world_size = 1);

// Parses YAML text. `source` names it in messages (a file path). `overrides` are "key.path=value"
// strings from --set, applied on top of the text before validation (recipe/overrides.h): a value is
// YAML, a mapping replaces a whole section (--set 'optimizer={type: adamw, lr: 0.002}'), and a --set
// that switches a registered type (optimizer.type=adamw) drops the text's keys of the old type that
// the new one lacks. What that dropped is said in one line each ("optimizer.type: adamw (was sgd in
// r.yaml): dropped the keys adamw does not have: momentum, nesterov"): appended to `notes` when
// given, else logged (logger().info).
Config parse_config(const std::string& yaml_text, const std::string& source,
                    const std::vector<std::string>& overrides = {}, std::vector<std::string>* notes = nullptr);

// Reads and parses a YAML file; a missing or unreadable file is an error naming it.
Config load_config(const std::filesystem::path& path, const std::vector<std::string>& overrides = {},
                   std::vector<std::string>* notes = nullptr);

// The resolved configuration as YAML (every key, defaults included). parse_config of the result
// gives back the same Config.
std::string config_to_yaml(const Config& config);

// A key whose value differs between two configs (a run resumed with another config).
struct ConfigDifference {
  std::string key;            // e.g. "data.train_limit"
  std::string before, after;  // the values as one-line YAML; "(absent)" when a config lacks the key
  // Whether the change alters what a resumed run could otherwise continue exactly: the data and
  // its order (data.* but the loader's worker and buffer counts), the model, the schedule and its
  // length (schedule.*, train.epochs), the batches per step (train.accumulate_steps,
  // train.effective_batch_size), optimizer.type, train.precision and run.seed.
  bool breaks_exactness = false;
};

// The keys whose values differ between `before` and `after`, in config order.
std::vector<ConfigDifference> config_differences(const Config& before, const Config& after);

}  // namespace stoker
