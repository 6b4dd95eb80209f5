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
#include "models/activation_checkpointing.h"
#include "models/registry.h"
#include "models/weights/pretrained.h"
#include "observe/sinks.h"
#include "optim/grad_scaler.h"
#include "optim/optim.h"
#include "optim/schedule.h"
#include "trainer/callbacks.h"
#include "trainer/freeze.h"
#include "trainer/losses.h"
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

// The distributed: section: what data-parallel training does beyond averaging gradients (run.distributed
// decides whether a run joins its ranks at all). With one process none of it has anything to do.
struct DistributedOptions {
  // How the ranks train together (parallel/strategy.h, a registered type): auto (ddp, or zero1 with
  // shard_optimizer: true; alone: single) | single | ddp | zero1.
  std::string strategy = "auto";
  // Every models::BatchNorm2d normalises over the batches of all ranks (parallel/sync_batchnorm.h).
  bool sync_batchnorm = false;
  // The BatchNorm running statistics before each evaluation: broadcast (rank 0's) | reduce (the mean
  // over the ranks), as timm's --dist-bn.
  std::string eval_bn = "broadcast";
  // ZeRO-1: each rank keeps and updates the optimizer state of 1/N of the parameters
  // (parallel/sharded_optimizer.h). Kept for the recipes that say it: true means strategy: zero1.
  bool shard_optimizer = false;
};

// The data: section is the data layer's own settings struct (data/settings.h).
using DataOptions = data::DataSettings;



struct TrainOptions {
  int64_t epochs = 10;
  // fp32 | tf32 | bf16-mixed | fp16-mixed | bf16-true | auto. auto: chosen at start for the device from
  // its features and a few timed steps (recipe/precision_trial.h); a resumed run keeps its choice.
  Precision precision = Precision::kFp32;
  GradScalerOptions loss_scale;    // used by fp16-mixed (its `enabled` is derived from the precision)
  // Gradient accumulation: one optimizer step every `accumulate_steps` batches, or, when
  // `effective_batch_size` is set, as many batches as make that many samples per optimizer step
  // (across all shards). See batch_arithmetic().
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

// What a run records beyond metrics.jsonl and the log (docs/runs.md, "Watching a run").
struct LoggingOptions {
  // Where the metrics records go: registered sink types with their own keys (observe/sinks.h).
  std::vector<TypedOptions> sinks = default_sinks();
  bool telemetry = true;              // GPU telemetry from NVML (observe/telemetry.h); CUDA only
  double telemetry_interval_s = 1.0;  // seconds between NVML samples (averaged per logged step)
  bool flops = true;                  // count the model's FLOPs at start: TFLOP/s and MFU (models/flops.h)
  // Every rank logs, per optimizer step, a digest of the samples it trained on and their augmentation
  // seeds (XOR over ranks: the global step's), to check that runs on different numbers of processes
  // or workers saw the same batches. Non-zero ranks then log at info level too.
  bool sample_digests = false;
};

struct Config {
  RunOptions run;
  DataOptions data;
  // model.type and that type's own keys beside it (compact_resnet: widths, blocks, dropout).
  TypedOptions model = models::model_options("compact_resnet");
  // Keys of every model type beside them: where its weights start (model.pretrained,
  // model.pretrained_skip, model.pretrained_rename: recipe/pretrained.h) and what of it trains when
  // (model.freeze, model.freeze_until_epoch: trainer/freeze.h).
  models::weights::PretrainedOptions pretrained;
  FreezeOptions freeze;
  // model.activation_checkpointing: true (every block) | false | [block indices], for every model type
  // whose family has blocks (models/activation_checkpointing.h).
  models::BlockSelection activation_checkpointing;
  OptimizerOptions optimizer;
  // loss.type (cross_entropy | bce, or registered: trainer/losses.h) and its own keys beside it; the
  // label smoothing is train.label_smoothing.
  TypedOptions loss{"cross_entropy", std::make_unique<NoOptions>()};
  ScheduleOptions schedule;
  TrainOptions train;
  DistributedOptions distributed;
  CheckpointOptions checkpoint;
  LoggingOptions logging;
};

// The batch arithmetic of a run on `world_size` data-parallel ranks (1 alone), computed here and
// nowhere else: the RunPlan holds it for everything downstream (recipe/run_plan.h), the load-time check
// reads it with world size 1.
struct BatchArithmetic {
  // The ranks the data is split over: the process group's, or data.shard_count when sharded by hand.
  int64_t shards = 1;
  int64_t per_step_batch = 0;    // data.batch_size x shards: the samples of one batch on every rank
  // Batches per optimizer step: train.accumulate_steps, or train.effective_batch_size / per_step_batch.
  int64_t accumulate_steps = 1;
  int64_t global_batch = 0;      // samples per optimizer step over all processes
  // optimizer.lr, scaled by global_batch / optimizer.lr_reference_batch when that is set (the linear
  // scaling rule of Goyal et al., 2017).
  double lr = 0;
  // Non-empty when train.effective_batch_size is not a multiple of per_step_batch or disagrees with
  // train.accumulate_steps: the message, naming the keys and what to use.
  std::string problem;
};
BatchArithmetic batch_arithmetic(const Config& config, int64_t world_size = 1);

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
  // its order (data.* but the loader's worker and buffer counts), the model (but
  // model.activation_checkpointing), the schedule and its length (schedule.*, train.epochs), the batches
  // per step (train.accumulate_steps, train.effective_batch_size), optimizer.type, train.precision,
  // run.seed, distributed.sync_batchnorm and distributed.eval_bn.
  bool breaks_exactness = false;
};

// The keys whose values differ between `before` and `after`, in config order.
std::vector<ConfigDifference> config_differences(const Config& before, const Config& after);

}  // namespace stoker
