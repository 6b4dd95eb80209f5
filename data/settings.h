// The `data:` section of a recipe as the data layer's own struct: what a user sets for the data set
// and its two loaders (training and evaluation). The config layer maps YAML keys onto these fields
// (recipe/config.cpp) and adds the key path and line to errors; the data layer derives the full
// DatasetOptions and LoaderOptions of a split from them here, adding what the run decides (seed,
// device, input dtype, layout) — user settings kept apart from derived ones, as libtorch keeps
// DataLoaderOptions apart from FullDataLoaderOptions.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <torch/types.h>

#include "common/options.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/resolution.h"

namespace stoker::data {

// What to do with a sample that cannot be read or decoded.
enum class BadSamples {
  kSkip,  // warn and count; training uses another readable sample in its place, evaluation leaves it out
  kError  // stop with an error naming the sample
};

// Samples kept in memory after their first read (data/cache.h): none; raw (the bytes each read
// gives, so storage is read once); decoded (decoded, untransformed images, so decoding happens once).
enum class DataCache { kNone, kRaw, kDecoded };

// data.autotune: continuous, when it acts (recipe/continuous.h; docs/doctor.md). A logging window is
// starved when the step waited for data over starved_wait of its time, or, on CUDA, when the GPU sat
// idle between steps over starved_gpu_idle of it while the step waited for data at least fed_wait;
// only a window below fed_wait ends a streak (hysteresis). `windows` starved windows in a row double the
// workers; the change is then judged over `cooldown` windows and undone for good when samples/s fell
// below `worse` x before. max_workers 0: twice the cores, at most 8.
struct AutotuneWatch {
  double starved_wait = 0.10;
  double fed_wait = 0.05;
  double starved_gpu_idle = 0.10;
  int64_t windows = 3;
  int64_t cooldown = 5;
  double worse = 0.95;
  int64_t max_workers = 0;
};

struct DataSettings {
  // The data set type (idx | cifar10 | cifar100 | image_folder | synthetic, or registered) and its
  // own keys (data.<type>: ...).
  TypedOptions dataset = dataset_type_options("idx");
  std::string root = "/usr/share/datasets/fashion-mnist";  // ~ expanded; relative: from the working directory
  int64_t num_classes = 0;  // 0: taken from the data (the class folders, the data set's own count)
  // Image folders of class folders without train/ and val/: the share of each class held out as the
  // test split (seeded with run.seed, stratified); 0: the folders have train/ and val/.
  double val_split = 0;
  int64_t batch_size = 128;
  int64_t eval_batch_size = 1000;
  bool shuffle = true;
  bool drop_last = true;
  // Repeated augmentation (DeiT): every training sample K times in a row, with different draws; the
  // epoch keeps the data set's length (SamplerOptions::repeats). 1 = off.
  int64_t repeated_augmentation = 1;
  int64_t workers = 0;          // loader threads; 0 = build batches on the training thread
  int64_t prefetch_factor = 2;  // batches in flight per worker
  int64_t device_prefetch = 2;  // batches copied to the GPU ahead of use
  bool pin_memory = true;       // pinned batch buffers when training on CUDA
  DataCache cache = DataCache::kNone;  // keep samples in memory (`trainer doctor` says when it pays)
  // off | start | continuous. start: before a new run's first epoch, workers, prefetch_factor,
  // device_prefetch and cache are searched by measurement (`trainer doctor --tune` on the run's loader
  // and model), within autotune_budget_s seconds and autotune_max_share of the run's estimated length,
  // and the winner trained with; a resumed run keeps the values its start chose. continuous: the
  // workers rise between steps while the logging windows keep waiting for data (recipe/continuous.h).
  // docs/doctor.md.
  std::string autotune = "off";
  double autotune_budget_s = 60;
  double autotune_max_share = 0.05;
  AutotuneWatch autotune_continuous;  // continuous: when a window counts as starved, and how to react
  BadSamples on_bad_sample = BadSamples::kSkip;
  // JPEG/PNG files whose header claims more pixels are bad samples, refused before decoding
  // (decompression bombs); Pillow's default.
  int64_t max_image_pixels = kDefaultMaxImagePixels;
  // Registered transform types with their own keys (data/transform_options.h).
  std::vector<TypedOptions> train_transforms;
  std::vector<TypedOptions> eval_transforms;
  // Progressive resizing: the training transforms' output size per epoch (data/resolution.h); off
  // by default (the sizes train_transforms give).
  ResolutionSchedule resolution_schedule;
  // The evaluation transforms' output size (with_output_size); 0: the size eval_transforms give.
  int64_t eval_size = 0;
  std::vector<double> mean{0.0};  // per channel, on the 0..1 scale; applied on the device
  std::vector<double> std{1.0};
  int64_t train_limit = 0;  // use only the first N training samples (0 = all)
  int64_t test_limit = 0;   // use only the first N test samples (0 = all)
  // Sharding by hand (run.distributed: off): this process's share of every epoch. Under a launcher
  // the process group decides it (LoaderContext::rank and world_size), and these stay 0 and 1.
  int64_t shard_rank = 0;
  int64_t shard_count = 1;
  // Operations on the training batches, on the device after normalisation, in order: registered types
  // with their own keys (data/batch_ops.h: random_erasing, mixup); none by default.
  std::vector<TypedOptions> batch_ops;
};

// What the run adds to the settings for a loader: derived, never set in the data: section.
struct LoaderContext {
  uint64_t seed = 0;
  torch::Device device = torch::kCPU;
  torch::ScalarType input_dtype = torch::kFloat32;  // the compute dtype of mixed precision
  bool channels_last = false;
  bool output_uint8 = false;  // hand out uint8 batches as built (benchmarks)
  // Data-parallel training: this process's rank and the number of ranks (the process group's), so that
  // each trains its share of every epoch; 0 and 1 alone (then DataSettings::shard_* may shard by hand).
  int64_t rank = 0, world_size = 1;
  // Batches per optimizer step (gradient accumulation): a training epoch ends after its last whole step.
  int64_t step_batches = 1;
  // The training epoch whose size (data.resolution_schedule) the training loader is built at.
  int64_t epoch = 0;
  std::function<void(const std::string&)> warn;
};

// `path` with a leading ~ (alone or ~/...) replaced by $HOME, as a shell would.
std::string expand_home(const std::string& path);

// The options of the `split` ("train" or "test") data set the settings describe (data.root's ~
// expanded).
DatasetOptions dataset_options(const DataSettings& settings, const std::string& split, uint64_t seed);
// The transforms of the training loader in `epoch`: train_transforms, made to end at the
// resolution_schedule's size for the epoch when there is one.
std::vector<TypedOptions> train_transforms_at(const DataSettings& settings, int64_t epoch);
// The transforms of evaluation (and prediction, export): eval_transforms, made to end at eval_size
// when it is set.
std::vector<TypedOptions> eval_transforms_of(const DataSettings& settings);
// The options of the `split` loader: batch size, order and transforms of that split (the training
// transforms at context.epoch's size: train_transforms_at; evaluation's: eval_transforms_of).
LoaderOptions loader_options(const DataSettings& settings, const std::string& split, const LoaderContext& context);

}  // namespace stoker::data
