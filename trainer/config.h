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

#include "data/transforms.h"

namespace stoker {

struct RunOptions {
  std::string name = "run";     // run directory: <dir>/<name>/<timestamp>/
  std::string dir = "runs";
  uint64_t seed = 42;
  std::string device = "auto";  // auto | cpu | cuda | cuda:N
  int64_t threads = 0;          // libtorch intra-op threads; 0 = one per core
};

struct SyntheticDataOptions {
  int64_t train_samples = 10000;
  int64_t test_samples = 1000;
  int64_t height = 32, width = 32, channels = 3;
  int64_t cpu_cost_us = 0;  // busy CPU time per sample, standing in for an expensive decode
};

struct DataOptions {
  std::string type = "idx";  // idx | cifar10 | cifar100 | image_folder | synthetic (or registered)
  std::string root = "/usr/share/datasets/fashion-mnist";
  int64_t num_classes = 10;
  int64_t batch_size = 128;
  int64_t eval_batch_size = 1000;
  bool shuffle = true;
  bool drop_last = true;
  int64_t workers = 0;          // loader threads; 0 = build batches on the training thread
  int64_t prefetch_factor = 2;  // batches in flight per worker
  int64_t device_prefetch = 2;  // batches copied to the GPU ahead of use
  bool pin_memory = true;       // pinned batch buffers when training on CUDA
  std::string on_bad_sample = "skip";  // skip (warn, replace, count) | error
  std::vector<data::TransformSpec> train_transforms;
  std::vector<data::TransformSpec> eval_transforms;
  std::vector<double> mean{0.0};  // per channel, on the 0..1 scale; applied on the device
  std::vector<double> std{1.0};
  int64_t train_limit = 0;  // use only the first N training samples (0 = all)
  int64_t test_limit = 0;   // use only the first N test samples (0 = all)
  int64_t shard_rank = 0;   // this process's share of every epoch (for distributed training)
  int64_t shard_count = 1;
  SyntheticDataOptions synthetic;
};

struct ModelOptions {
  std::string type = "compact_resnet";
  std::vector<int64_t> widths{16, 32, 64};
  std::vector<int64_t> blocks{1, 1, 1};
  double dropout = 0.0;
};

struct OptimizerOptions {
  std::string type = "sgd";  // sgd | adamw
  double lr = 0.1;
  double momentum = 0.9;     // sgd
  bool nesterov = true;      // sgd
  std::vector<double> betas{0.9, 0.999};  // adamw
  double eps = 1e-8;                      // adamw
  double weight_decay = 5e-4;
  bool decay_norm_and_bias = false;  // apply weight decay to 1-D parameters (norms, biases) too
  // auto (fused kernels on CUDA, foreach on the CPU) | fused | foreach | reference (libtorch's own)
  std::string implementation = "auto";
};

struct ScheduleOptions {
  std::string type = "cosine";  // constant | cosine (after the linear warm-up)
  double warmup_epochs = 0.0;
  double final_lr_ratio = 0.0;  // cosine ends at lr * final_lr_ratio
};

// The dynamic loss scaler of fp16-mixed (see trainer/grad_scaler.h).
struct LossScaleOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

struct TrainOptions {
  int64_t epochs = 10;
  std::string precision = "fp32";  // fp32 | tf32 | bf16-mixed | fp16-mixed | bf16-true
  LossScaleOptions loss_scale;     // used by fp16-mixed
  // Gradient accumulation: one optimizer step every `accumulate_steps` batches, or, when
  // `effective_batch_size` is set, as many batches as make that many samples per optimizer step
  // (across all shards). See accumulate_steps_of().
  int64_t accumulate_steps = 1;
  int64_t effective_batch_size = 0;
  bool strict_sizes = false;     // batch/channel sizes that are not multiples of 8 are errors
  bool cuda_graph = false;       // capture the whole training step as one CUDA graph

  double label_smoothing = 0.0;
  double grad_clip_norm = 0.0;  // clip gradients to this global L2 norm; 0 = off
  bool channels_last = false;   // model and inputs in channels-last memory format
  int64_t log_every_steps = 50;
};

struct CheckpointOptions {
  bool save_last = true;
  bool save_best = true;
  std::string best_metric = "test_top1";  // test_top1 (higher is better) | test_loss (lower)
  int64_t every_steps = 0;                // also save `last` every N optimizer steps; 0 = per epoch
};

struct Config {
  RunOptions run;
  DataOptions data;
  ModelOptions model;
  OptimizerOptions optimizer;
  ScheduleOptions schedule;
  TrainOptions train;
  CheckpointOptions checkpoint;
};

// Batches per optimizer step: train.accumulate_steps, or derived from train.effective_batch_size
// (which must be a multiple of data.batch_size * data.shard_count).
int64_t accumulate_steps_of(const Config& config);

// Parses YAML text. `source` names it in messages (a file path). `overrides` are "key.path=value"
// strings from --set, applied on top of the text before validation.
Config parse_config(const std::string& yaml_text, const std::string& source,
                    const std::vector<std::string>& overrides = {});

// Reads and parses a YAML file; a missing or unreadable file is an error naming it.
Config load_config(const std::filesystem::path& path,
                   const std::vector<std::string>& overrides = {});

// The resolved configuration as YAML (every key, defaults included). parse_config of the result
// gives back the same Config.
std::string config_to_yaml(const Config& config);

}  // namespace stoker
