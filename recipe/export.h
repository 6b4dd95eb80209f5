// `trainer export`: a checkpoint's model written for deployment as ONNX (models/onnx/export.h),
// TorchScript (models/torchscript.h) or a state dict (models/weights/state_dict.h), the format named or
// taken from the output's extension; and beside every export `<output>.json`, what a deployment
// needs to feed the model and read its answer (class names, mean, std, input size and channels,
// input and output names). ONNX files carry the same entries in their metadata_props, TorchScript
// files as the extra file `stoker.json`. Every file is written atomically (common/atomic_write.h),
// after the output folder was made or checked and before nothing else was done.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace stoker {

enum class ExportFormat { kOnnx, kTorchScript, kStateDict, kSafetensors };

std::string export_format_name(ExportFormat format);  // "onnx", "torchscript", "state_dict", "safetensors"

// The format of an export to `output`: `format` ("onnx", "torchscript", "state_dict", "safetensors"), or
// when it is empty, the one `output`'s extension names: .onnx ONNX; .ts and .torchscript TorchScript; .pth
// a state dict; .safetensors safetensors. A .pt file may be TorchScript or a state dict (PyTorch's own docs use it for both),
// so it needs --format; so does any other extension. A format whose extension says otherwise
// (--format state_dict with model.onnx) is a stoker::Error naming both.
ExportFormat export_format(const std::string& format, const std::filesystem::path& output);

// An input size: "HxW" (224x160) or "N" (N x N).
struct InputSize {
  int64_t height = 0, width = 0;
};
// Parses --input-size; a stoker::Error saying the form otherwise.
InputSize parse_input_size(const std::string& text);

struct ExportRequest {
  std::filesystem::path checkpoint;
  // The config of the model: this file with `overrides`, else the checkpoint's own (with them).
  std::optional<std::filesystem::path> config_file;
  std::vector<std::string> overrides;
  std::string format;  // onnx | torchscript | state_dict | safetensors; empty: from the output's extension
  bool use_ema = false;  // the checkpoint's EMA weights
  std::filesystem::path output;
  // The model's input height and width; default the recipe's (its test data through
  // data.eval_transforms, so the data must be there). ONNX and TorchScript need one; a state dict's
  // JSON records it when known.
  std::optional<InputSize> input_size;
  // ONNX only (a stoker::Error with another format):
  std::optional<int64_t> opset;       // default 17
  bool dynamic_batch = false;         // a symbolic batch dimension, else batch 1
  bool include_normalize = false;     // the graph takes pixels / 255 and normalises itself
  std::optional<std::string> dtype;   // float32 (default) | float16
};

struct ExportResult {
  ExportFormat format = ExportFormat::kStateDict;
  std::filesystem::path model;     // the file written
  std::filesystem::path metadata;  // <model>.json beside it
  std::string summary;             // one line saying what was written
};

// Loads the checkpoint's weights (or EMA weights) into the configured model on the CPU, in float32
// (whatever the run's precision), and writes it in the request's format, then its JSON. A
// checkpoint of another architecture than the config names is a stoker::Error naming both.
//   state_dict:  torch.save format; torchvision names for the torchvision-layout ResNets.
//   safetensors: recipe/hub_export.h: timm's names and a Hub config.json for a run from timm's weights.
//   torchscript: traced by libtorch's C++ tracer in eval mode (torch.jit.load / torch::jit::load),
//                the JSON also as the extra file "stoker.json".
//   onnx:        the eval-mode graph, batch norms folded into the convolutions, checked by ONNX's
//                checker; optionally the normalisation as its first nodes and float16 weights.
ExportResult export_checkpoint(const ExportRequest& request);

}  // namespace stoker
