// Checkpoints: what they hold (model, optimizer, training position, RNG state, the resolved
// config), and writing them atomically (temporary file, flush, fsync, rename), so that an
// interrupted write never destroys the previous checkpoint.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "common/atomic_write.h"

namespace stoker {

// Where training stands. Saved in every checkpoint; a resumed run continues from here.
struct TrainState {
  int64_t epoch = 0;           // the epoch in progress (0-based)
  int64_t batch_in_epoch = 0;  // the next batch of that epoch to train on
  int64_t step = 0;            // optimizer steps taken so far
  double best_metric = std::numeric_limits<double>::quiet_NaN();  // NaN until the first evaluation
  int64_t best_epoch = -1;
  // train.early_stopping: the best value of its metric so far and the epoch (0-based) it came in.
  double early_stop_best = std::numeric_limits<double>::quiet_NaN();
  int64_t early_stop_epoch = -1;
  // The data-parallel ranks that trained the run (1 alone): its batches and each rank's position in
  // the epoch depend on it. 0 when read from a checkpoint written before it was recorded.
  int64_t world_size = 1;
  // Each rank's batch and the batches per optimizer step: with world_size they say where in the
  // epoch's order batch_in_epoch stands, so that a run resumes on another number of ranks (the same
  // global batch cut differently). 0 when read from a checkpoint written before they were recorded.
  int64_t batch_size = 0;
  int64_t accumulate_steps = 0;
};

struct CheckpointContent {
  TrainState state;
  std::string config_yaml;  // the resolved config of the run that wrote it
  // The name of each class by label (saved as "class_names", one per line); empty when the data had
  // none, and in checkpoints written before class names were saved.
  std::vector<std::string> class_names;
  // The EMA of the weights (optim/ema.h) by parameter and buffer name, saved as "ema.<name>";
  // empty when the run has none.
  std::vector<std::pair<std::string, torch::Tensor>> ema;
  int64_t ema_updates = 0;
};

// Further state a checkpoint carries as a named part of its own (the loss scaler's, say): `save`
// writes it, `load` restores it (and must accept a checkpoint without that part, written by a run
// that did not have it: try_read tells).
struct CheckpointPart {
  std::string name;
  std::function<void(torch::serialize::OutputArchive&)> save;
  std::function<void(torch::serialize::InputArchive&)> load;
};

// Serialises model parameters and buffers, optimizer state, `content`, `parts` and the RNG state of
// the CPU (and of the CUDA device when `model` lives there) into the bytes of a checkpoint file.
std::string serialize_checkpoint(torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                                 const CheckpointContent& content,
                                 const std::vector<CheckpointPart>& parts = {});

// serialize_checkpoint, then write_file_atomically.
void save_checkpoint(const std::filesystem::path& path, torch::nn::Module& model,
                     torch::optim::Optimizer& optimizer, const CheckpointContent& content,
                     const std::vector<CheckpointPart>& parts = {});

// Loads a checkpoint written by save_checkpoint into `model` (every parameter and buffer must be
// present with the same shape) and, when given, `optimizer`; restores the RNG state. Tensors land on
// `device`. Throws stoker::Error naming the file and what does not fit.
// Each of `parts` is loaded from its sub-archive when the checkpoint has one.
CheckpointContent load_checkpoint(const std::filesystem::path& path, torch::nn::Module& model,
                                  torch::optim::Optimizer* optimizer, torch::Device device,
                                  const std::vector<CheckpointPart>& parts = {});

// Whether `path` is a Stoker checkpoint (a readable archive with the format marker), without
// throwing.
bool is_stoker_checkpoint(const std::filesystem::path& path);
// The model's parameters and buffers saved in a checkpoint, by name, on the CPU (model.pretrained from
// a run of Stoker's own); the EMA of the weights instead with `ema` (an error when it has none).
std::vector<std::pair<std::string, torch::Tensor>> read_checkpoint_weights(const std::filesystem::path& path,
                                                                            bool ema = false);

// The resolved config YAML saved in a checkpoint (empty if it has none).
std::string read_checkpoint_config(const std::filesystem::path& path);
// The world size a checkpoint's run trained with (TrainState::world_size; 0 when not recorded).
int64_t read_checkpoint_world_size(const std::filesystem::path& path);
// Each rank's batch in a checkpoint's run (TrainState::batch_size; 0 when not recorded).
int64_t read_checkpoint_batch_size(const std::filesystem::path& path);

// The batch of the epoch at which a run saved at `saved` continues when it is now trained by
// `world_size` ranks with batch `batch_size`, `accumulate_steps` batches per step: the same place in
// the epoch's order (the sampler cuts global batches the same way whatever the world size). Throws,
// naming `checkpoint` and the flags that fix it, when the global batch per step differs.
int64_t resumed_batch_in_epoch(const TrainState& saved, int64_t world_size, int64_t batch_size,
                               int64_t accumulate_steps, const std::string& checkpoint);

// The class names saved in a checkpoint (empty if it has none).
std::vector<std::string> read_checkpoint_class_names(const std::filesystem::path& path);

// Accepts a checkpoint file, a run directory (then its checkpoints/last.pt), or a run directory with
// `:best` or `:last` after it (runs/x/20260101-120000:best: its checkpoints/best.pt). A file that is
// not a Stoker checkpoint is refused here, saying what it is (describe_file) and what to do.
std::filesystem::path resolve_checkpoint(const std::filesystem::path& run_dir_or_file);

// What a file that is not a Stoker checkpoint is, for messages: "a state dict or another torch.save
// file (...)", "a TorchScript module", "a YAML file", "empty", or "" when it may be a checkpoint.
std::string describe_file(const std::filesystem::path& path);

}  // namespace stoker
