// The one-shot tasks on a trained run: `trainer eval` (a checkpoint on the config's test split) and
// `trainer predict` (image files), and the loading of a checkpoint's model they share with
// `trainer export` (recipe/export.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/nn/modules/container/any.h>

#include "data/batch_source.h"
#include "optim/ema.h"
#include "recipe/config.h"
#include "trainer/checkpoint.h"
#include "trainer/evaluate.h"

namespace stoker {

// ---- trainer eval ---------------------------------------------------------------------------------

struct CheckpointEvaluation {
  EvalResult model;               // the checkpoint's weights
  std::optional<EvalResult> ema;  // its EMA of the weights, when it has one
  TrainState state;               // where its run stood
};

// Builds the configured model, loads `checkpoint` into it and evaluates it (and its EMA weights)
// on the config's test split (labelled by the checkpoint's class names: a class folder the run did
// not train on, or one it lacks, is an error listing both), in train.precision as training evaluates (autocast for the mixed
// precisions, bfloat16 weights for bf16-true, TF32 off for fp32: see apply_global_precision, which
// it applies process-wide as the Trainer does).
CheckpointEvaluation evaluate_checkpoint(const Config& config, const std::filesystem::path& checkpoint);

// ---- trainer predict ------------------------------------------------------------------------------

struct PredictRequest {
  std::filesystem::path checkpoint;
  // The config for the model, its input channels and data.eval_transforms / mean / std: this file
  // when given, else the resolved config saved in the checkpoint. `overrides` apply to either.
  std::optional<std::filesystem::path> config_file;
  std::vector<std::string> overrides;
  std::vector<std::filesystem::path> images;
  int64_t top_k = 5;
  bool use_ema = false;  // the checkpoint's EMA weights instead of its model weights
};

struct ImagePrediction {
  std::filesystem::path image;
  std::vector<int64_t> classes;       // the top k class indices, most probable first
  std::vector<std::string> names;     // their names (the checkpoint's class names), or the indices
  std::vector<double> probabilities;  // their softmax probabilities
};

// Runs each image (JPEG or PNG) through the loader's own per-sample pipeline (data/pipeline.h: read,
// decode, data.eval_transforms) and normalisation (data/normalize.h: data.mean / data.std) and
// classifies it. An unreadable image is a stoker::Error naming it.
std::vector<ImagePrediction> predict_images(const PredictRequest& request);

// ---- shared by the tasks on a checkpoint (export too: recipe/export.h) ---------------------------

// The config of a task on `checkpoint`: `config_file` with `overrides` when given, else the config
// saved in the checkpoint with them. A config file that names another model.type than the
// checkpoint was trained as is a stoker::Error naming both.
Config checkpoint_task_config(const std::filesystem::path& checkpoint,
                              const std::optional<std::filesystem::path>& config_file,
                              const std::vector<std::string>& overrides);

// The configured model with the checkpoint's weights, or its EMA weights swapped in for as long as
// this lives; on `device` in train.precision's parameter dtype, in eval mode. Built for `input`, whose
// size is 0 x 0 where the task does not know it: a model whose parameters depend on the size (a ViT)
// takes it from the run's resolved config (model.image_size).
struct CheckpointModel {
  torch::nn::AnyModule model;
  ModelEma ema{0.0};  // only holds the saved average
  std::optional<EmaWeightsInModel> ema_weights;
};
// Weights that do not fit the configured model are a stoker::Error naming the file and, where the
// checkpoint's saved config describes another model, both models.
std::unique_ptr<CheckpointModel> load_checkpoint_model(const Config& config, const std::filesystem::path& checkpoint,
                                                       bool use_ema, const data::InputShape& input,
                                                       torch::Device device);

}  // namespace stoker
