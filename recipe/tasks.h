// The one-shot tasks on a trained run: `trainer eval` (a checkpoint on the config's test split),
// `trainer predict` (image files) and `trainer export` (TorchScript or a state dict).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

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

// ---- trainer export -------------------------------------------------------------------------------

struct ExportRequest {
  std::filesystem::path checkpoint;
  std::optional<std::filesystem::path> config_file;  // as PredictRequest: default the checkpoint's
  std::vector<std::string> overrides;
  // state_dict: torch.save format (models/state_dict.h; torchvision names for the torchvision-layout
  // ResNets), in the run's dtype. torchscript: the model traced by libtorch's C++ tracer
  // (models/torchscript.h) in eval mode, float32, contiguous, on the recipe's input size (its test
  // data through data.eval_transforms); torch.jit.load / torch::jit::load.
  std::string format = "state_dict";
  bool use_ema = false;  // the checkpoint's EMA weights
  std::filesystem::path output;
};
// Loads the checkpoint's weights (or EMA weights) into the configured model on the CPU and writes
// them to request.output in request.format.
void export_checkpoint(const ExportRequest& request);

}  // namespace stoker
