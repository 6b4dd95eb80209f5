// One split's batches as a run loads them, without a run: the loader an embedding application or the
// Python module (python/: stoker.Loader) iterates. It is built from a Config by the functions the run
// uses (make_dataset, make_loader, augment_training), so its batches are the trainer's for the same
// recipe, seed, rank and world size, whatever the worker count.
//
// It keeps its position (the epoch and the next batch it hands out) and saves it as a LoaderState: the
// same on every rank, and loadable at another world size with the same global batch (the trainer's
// resumed_batch_in_epoch cuts it anew). A state from another data configuration is refused, naming the
// keys that differ.
//
//   SplitLoader loader(load_config("configs/x.yaml"), SplitLoaderOptions().set_rank(1).set_world_size(2));
//   loader.begin();
//   while (auto batch = loader.next()) ...
//   LoaderState saved = loader.state();   // later, in another process: other.load_state(saved)
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/types.h>

#include "data/batch_source.h"
#include "data/loader.h"
#include "recipe/config.h"

namespace stoker {

struct SplitLoaderOptions {
  std::string split = "train";  // "train" or "test"
  // This process's rank and the ranks the data is split over (a launcher's, torch.distributed's); 0 of
  // 1 alone (data.shard_rank and data.shard_count may then shard by hand).
  int64_t rank = 0, world_size = 1;
  torch::Device device = torch::kCPU;
  bool output_uint8 = false;  // uint8 [B, H, W, C] batches as built, not normalised (data::LoaderOptions)

  SplitLoaderOptions& set_split(std::string v) { split = std::move(v); return *this; }
  SplitLoaderOptions& set_rank(int64_t v) { rank = v; return *this; }
  SplitLoaderOptions& set_world_size(int64_t v) { world_size = v; return *this; }
  SplitLoaderOptions& set_device(torch::Device v) { device = v; return *this; }
  SplitLoaderOptions& set_output_uint8(bool v) { output_uint8 = v; return *this; }
};

// Where a SplitLoader stands, and what decides its batches.
struct LoaderState {
  std::string split;
  int64_t epoch = 0;  // the epoch in progress (0-based)
  int64_t batch = 0;  // the next batch of that epoch on every rank
  // How the epoch was cut: ranks, each rank's batch, batches per optimizer step (TrainState's fields).
  int64_t world_size = 1, batch_size = 0, accumulate_steps = 1;
  // run.seed and the data: section as YAML: what decides the batches.
  std::string data_yaml;
};

class SplitLoader {
 public:
  // Checks the config as the run does (the data set exists, the transforms end at one size); a bad
  // rank or world size is an InvalidValueError naming it.
  SplitLoader(const Config& config, SplitLoaderOptions options);

  int64_t num_batches() const { return source_->num_batches(); }
  int64_t num_samples() const { return source_->num_samples(); }
  int64_t batch_size() const { return loader_->options().batch_size; }
  int64_t rank() const { return options_.rank; }
  int64_t world_size() const { return shards_; }
  std::vector<std::string> class_names() const { return source_->class_names(); }
  data::InputShape shape() const { return source_->shape(); }
  const Config& config() const { return config_; }

  // The next begin() starts `epoch` at its first batch.
  void set_epoch(int64_t epoch);
  // Starts handing out batches at the position (after a finished epoch: the next epoch's first batch),
  // abandoning any batches in flight.
  void begin();
  // The next batch, or nothing at the end of the epoch (begin() then starts the next one). Before
  // begin() or after close() it is an error.
  std::optional<data::Batch> next();
  // Per-stage seconds since the last call (data::StageTimes: read, decode, transform, wait, copy,
  // batch operations).
  data::StageTimes take_times();

  LoaderState state() const;
  // Continues where `state` stands (at this loader's world size); the next begin() starts there.
  // Throws InvalidValueError naming what differs: the split, run.seed or a data: key that decides the
  // batches (not the worker or buffer counts), or the global batch.
  void load_state(const LoaderState& state);

  // Stops the workers and frees the buffers for good; every later call but close() is an error.
  void close();
  bool closed() const { return closed_; }

 private:
  void check_open() const;

  Config config_;
  SplitLoaderOptions options_;
  int64_t shards_ = 1, accumulate_steps_ = 1;
  std::shared_ptr<data::Loader> loader_;
  std::shared_ptr<data::BatchSource> source_;  // loader_, or it with the batch operations
  int64_t epoch_ = 0, batch_ = 0;  // the position: the next batch handed out
  bool started_ = false, closed_ = false;
};

// run.seed and the data: section of `config` as YAML (LoaderState::data_yaml).
std::string loader_data_yaml(const Config& config);

}  // namespace stoker
