// `trainer export` (recipe/export.h): the format, the output folder, the model in float32 on the
// CPU, the three writers and the JSON beside each file.
#include "recipe/export.h"

#include <unistd.h>

#include <sstream>

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "common/atomic_write.h"
#include "common/error.h"
#include "common/log.h"
#include "data/pipeline.h"
#include "data/transform_options.h"
#include "models/onnx/export.h"
#include "models/onnx/proto.h"
#include "models/registry.h"
#include "models/torchscript.h"
#include "models/torchscript_model.h"
#include "models/weights/state_dict.h"
#include "recipe/factory.h"
#include "recipe/hub_export.h"
#include "recipe/loaders.h"
#include "recipe/tasks.h"

#ifndef STOKER_VERSION
#define STOKER_VERSION "unknown"
#endif

namespace stoker {
namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

namespace {

struct Extension {
  const char* suffix;
  std::vector<ExportFormat> formats;  // the formats a file so named may hold
};
const std::vector<Extension>& extensions() {
  static const std::vector<Extension> known = {
      {".onnx", {ExportFormat::kOnnx}},
      {".ts", {ExportFormat::kTorchScript}},
      {".torchscript", {ExportFormat::kTorchScript}},
      {".pth", {ExportFormat::kStateDict}},
      {".safetensors", {ExportFormat::kSafetensors}},
      {".pt", {ExportFormat::kTorchScript, ExportFormat::kStateDict}},
  };
  return known;
}

const std::vector<ExportFormat>* formats_of(const fs::path& output) {
  for (const Extension& e : extensions()) {
    if (output.extension() == e.suffix) return &e.formats;
  }
  return nullptr;
}

}  // namespace

std::string export_format_name(ExportFormat format) {
  switch (format) {
    case ExportFormat::kOnnx: return "onnx";
    case ExportFormat::kTorchScript: return "torchscript";
    case ExportFormat::kStateDict: return "state_dict";
    case ExportFormat::kSafetensors: return "safetensors";
  }
  return "?";
}

ExportFormat export_format(const std::string& format, const fs::path& output) {
  const std::vector<ExportFormat>* implied = formats_of(output);
  if (format.empty()) {
    STOKER_CHECK(implied != nullptr, "export --output {}: the extension does not say the format; name the file .onnx "
                 "(ONNX), .ts (TorchScript), .pth (state dict) or .safetensors, or give --format "
                 "onnx|torchscript|state_dict|safetensors",
                 output.string());
    STOKER_CHECK(implied->size() == 1, "export --output {}: a .pt file may be TorchScript or a state dict; give --format "
                 "torchscript or --format state_dict, or name the file .ts (TorchScript) or .pth (state dict)",
                 output.string());
    return implied->front();
  }
  std::optional<ExportFormat> named;
  for (const ExportFormat f :
       {ExportFormat::kOnnx, ExportFormat::kTorchScript, ExportFormat::kStateDict, ExportFormat::kSafetensors}) {
    if (export_format_name(f) == format) named = f;
  }
  STOKER_CHECK(named.has_value(), "export --format {}: unknown format; use onnx, torchscript, state_dict or safetensors",
               format);
  STOKER_CHECK(implied == nullptr || std::find(implied->begin(), implied->end(), *named) != implied->end(),
               "export --format {} --output {}: a {} file holds {}, not {}; change the extension (.onnx ONNX, .ts "
               "TorchScript, .pth state dict, .safetensors) or the --format",
               format, output.string(), output.extension().string(), export_format_name(implied->front()), format);
  return *named;
}

InputSize parse_input_size(const std::string& text) {
  InputSize size;
  const std::string usage = fmt::format("--input-size {}: give HxW (e.g. 224x224) or one number for a square", text);
  const size_t x = text.find('x');
  try {
    size_t used = 0;
    size.height = std::stoll(text.substr(0, x), &used);
    STOKER_CHECK(used == (x == std::string::npos ? text.size() : x), "{}", usage);
    size.width = size.height;
    if (x != std::string::npos) {
      size.width = std::stoll(text.substr(x + 1), &used);
      STOKER_CHECK(used == text.size() - x - 1, "{}", usage);
    }
  } catch (const std::logic_error&) {  // stoll: no number, or out of range
    STOKER_FAIL("{}", usage);
  }
  STOKER_CHECK(size.height > 0 && size.width > 0 && size.height <= 65536 && size.width <= 65536, "{}", usage);
  return size;
}

namespace {

// The output's folder made (or checked writable), before any work.
void prepare_output(const fs::path& output) {
  STOKER_CHECK(!output.empty(), "export needs an output file (--output FILE)");
  const fs::path folder = output.parent_path().empty() ? fs::path(".") : output.parent_path();
  std::error_code error;
  fs::create_directories(folder, error);
  STOKER_CHECK(!error && fs::is_directory(folder), "export --output {}: cannot create the folder {} ({}); choose "
               "another --output", output.string(), folder.string(), error ? error.message() : "a file has its name");
  STOKER_CHECK(::access(folder.c_str(), W_OK) == 0, "export --output {}: the folder {} is not writable; choose another "
               "--output", output.string(), folder.string());
}

// The options that only ONNX takes, refused with another format rather than ignored.
void check_format_options(const ExportRequest& r, ExportFormat format) {
  std::vector<std::string> given;
  if (r.opset) given.push_back("--opset");
  if (r.dynamic_batch) given.push_back("--dynamic-batch");
  if (r.include_normalize) given.push_back("--include-normalize");
  if (r.dtype) given.push_back("--dtype");
  STOKER_CHECK(format == ExportFormat::kOnnx || given.empty(), "export: {} appl{} to ONNX exports only, and this one "
               "writes {}; leave {} out or export --format onnx",
               fmt::join(given, ", "), given.size() == 1 ? "ies" : "y", export_format_name(format),
               given.size() == 1 ? "it" : "them");
  STOKER_CHECK(!r.dtype || *r.dtype == "float32" || *r.dtype == "float16",
               "export --dtype {}: use float32 or float16", *r.dtype);
  const int64_t newest = models::onnx::onnx_max_opset();
  STOKER_CHECK(!r.opset || (*r.opset >= 13 && *r.opset <= newest),
               "export --opset {}: Stoker writes ONNX opsets 13 to {} (the newest the ONNX library it was built with "
               "knows); 17, the default, suits ONNX Runtime 1.12+ and TensorRT 8.6+",
               r.opset.value_or(0), newest);
}

// The recipe's input size: --input-size, else its test split through data.eval_transforms, as the
// loader sizes its batches; nothing when neither tells and `required` is false.
std::optional<InputSize> input_size_of(const Config& config, const ExportRequest& r, ExportFormat format,
                                       bool required) {
  if (r.input_size) return r.input_size;
  const std::string why = fmt::format("export --format {} needs the model's input size, which comes from "
                                      "--input-size HxW or the recipe's test data", export_format_name(format));
  std::shared_ptr<data::Dataset> dataset;
  try {
    dataset = make_dataset(config, "test");
  } catch (const std::exception& e) {
    if (!required) return std::nullopt;
    STOKER_FAIL("{}: {}\ngive --input-size HxW, or make the data available (data.root, or --set data.root=...)", why,
                e.what());
  }
  const data::TransformPipeline transforms = data::make_transform_pipeline(data::eval_transforms_of(config.data));
  const data::SamplePipeline pipeline(dataset, data::SamplePipelineOptions().set_transforms(transforms));
  if (!pipeline.fixed_output() && !required) return std::nullopt;
  STOKER_CHECK(pipeline.fixed_output(), "{}, and the test images vary in size with no fixed-size crop in "
               "data.eval_transforms; give --input-size HxW, or add a center_crop", why);
  return InputSize{pipeline.out_height(), pipeline.out_width()};
}

// Every tensor of `model` in the dtype a freshly built one (`fresh`) has it, floating point ones in
// float32: a bf16-true run's weights widen exactly, and its integer buffers (batch norm's
// num_batches_tracked), which prepare_model's Module::to made bfloat16, are int64 again.
void float32_as_built(torch::nn::AnyModule& model, const torch::nn::AnyModule& fresh) {
  torch::NoGradGuard no_grad;
  const auto built = fresh.ptr()->named_buffers();
  for (torch::Tensor t : model.ptr()->parameters()) {
    if (t.scalar_type() != torch::kFloat32) t.set_data(t.to(torch::kFloat32));
  }
  for (const auto& b : model.ptr()->named_buffers()) {
    const torch::Tensor& as_built = built[b.key()];
    const torch::ScalarType dtype = as_built.is_floating_point() ? torch::kFloat32 : as_built.scalar_type();
    if (b.value().scalar_type() != dtype) b.value().set_data(b.value().to(dtype));
  }
}

// What the exporters share: the config, the model (CPU, float32, contiguous, eval mode, the EMA
// weights in when asked for) and the JSON that goes beside the file.
struct Export {
  Config config;
  int64_t channels = 0;
  std::unique_ptr<CheckpointModel> model;
  std::optional<InputSize> size;
  std::string what;  // "model.type resnet18"
  Json json;
};

// The entries of <output>.json every format has (recipe/export.h; docs/trainer.md lists them).
Json common_json(const Export& x, const ExportRequest& r, ExportFormat format) {
  std::vector<std::string> names = read_checkpoint_class_names(r.checkpoint);
  if (names.empty()) {  // the data had none: the indices, as `trainer predict` prints them
    for (int64_t c = 0; c < x.config.data.num_classes; ++c) names.push_back(std::to_string(c));
  }
  Json j;
  j["format"] = export_format_name(format);
  j["file"] = r.output.filename().string();
  j["model_type"] = x.config.model.type();
  j["weights"] = r.use_ema ? "ema" : "model";
  j["checkpoint"] = r.checkpoint.string();
  j["num_classes"] = x.config.data.num_classes;
  j["class_names"] = names;
  j["channels"] = x.channels;
  j["input_size"] = x.size ? Json::array({x.size->height, x.size->width}) : Json(nullptr);
  j["mean"] = x.config.data.mean;
  j["std"] = x.config.data.std;
  j["stoker_version"] = STOKER_VERSION;
  return j;
}

// The input and output as the model takes and gives them.
void describe_io(Json& j, bool normalize_inside, const Json& batch) {
  j["input"] = {{"name", "input"},
                {"shape", Json::array({batch, "channels", "height", "width"})},
                {"dtype", "float32"},
                {"layout", "NCHW, channels in the order the images decode to (RGB, or gray)"},
                {"values", normalize_inside ? "pixel / 255, in [0, 1]; the model subtracts mean and divides by std"
                                            : "(pixel / 255 - mean) / std per channel"}};
  j["output"] = {{"name", "logits"}, {"shape", Json::array({batch, "num_classes"})}, {"dtype", "float32"},
                 {"values", "logits, one per class (softmax for probabilities)"}};
  j["normalize_included"] = normalize_inside;
}

void write_json(const Export& x, const fs::path& path) { write_file_atomically(path, x.json.dump(2) + "\n"); }

// model.type: torchscript: the script itself with the trained weights (its code, not a trace).
std::string export_script(models::TorchScriptModelImpl& scripted, Export& x, const ExportRequest& r) {
  describe_io(x.json, false, Json("batch"));
  std::ostringstream bytes;
  scripted.script().save(bytes, {{"stoker.json", x.json.dump(2)}});
  write_file_atomically(r.output, bytes.str());
  return fmt::format("the TorchScript it was trained from ({})", scripted.path());
}

std::string export_torchscript(Export& x, const ExportRequest& r) {
  torch::nn::AnyModule& model = x.model->model;
  if (auto* scripted = dynamic_cast<models::TorchScriptModelImpl*>(model.ptr().get())) {
    return export_script(*scripted, x, r);
  }
  // Normalised inputs are about N(0, 1); the check batch has another size than the traced one.
  torch::Generator generator = at::detail::createCPUGenerator(x.config.run.seed);
  const torch::Tensor example = at::randn({2, x.channels, x.size->height, x.size->width}, generator);
  const torch::Tensor check = at::randn({3, x.channels, x.size->height, x.size->width}, generator);
  torch::jit::Module traced = models::trace_to_torchscript(
      *model.ptr(), [&](const torch::Tensor& t) { return model.forward(t); }, example, check, x.what);
  describe_io(x.json, false, Json("batch"));
  std::ostringstream bytes;
  traced.save(bytes, {{"stoker.json", x.json.dump(2)}});
  write_file_atomically(r.output, bytes.str());
  return fmt::format("TorchScript for input [N, {}, {}, {}] float32", x.channels, x.size->height, x.size->width);
}

std::string export_onnx_file(Export& x, const ExportRequest& r) {
  models::onnx::OnnxExportOptions o;
  o.what = x.what;
  o.opset = r.opset.value_or(17);
  o.input_chw = {x.channels, x.size->height, x.size->width};
  o.dynamic_batch = r.dynamic_batch;
  if (r.include_normalize) {
    o.mean = x.config.data.mean;
    o.std = x.config.data.std;
  }
  o.dtype = r.dtype.value_or("float32") == "float16" ? torch::kFloat16 : torch::kFloat32;
  o.num_classes = x.config.data.num_classes;
  o.producer_version = STOKER_VERSION;
  o.doc = fmt::format("{} ({} weights of {}), exported by Stoker", x.what, r.use_ema ? "EMA" : "the", r.checkpoint.string());
  describe_io(x.json, r.include_normalize, r.dynamic_batch ? Json("batch") : Json(1));
  x.json["opset"] = o.opset;
  x.json["dtype"] = r.dtype.value_or("float32");
  x.json["dynamic_batch"] = r.dynamic_batch;
  for (const auto& [key, value] : x.json.items()) {
    o.metadata.emplace_back(key, value.is_string() ? value.get<std::string>() : value.dump());
  }
  int64_t folded = 0;
  write_file_atomically(r.output, models::onnx::export_onnx(*x.model->model.ptr(), o, models::onnx_exporter_registry(), &folded));
  return fmt::format("ONNX opset {}, {} weights, input [{}, {}, {}, {}] float32 {}, {} batch norm(s) folded", o.opset,
                     x.json["dtype"].get<std::string>(), r.dynamic_batch ? "batch" : "1", x.channels, x.size->height,
                     x.size->width, r.include_normalize ? "in [0, 1] (normalised inside)" : "normalised", folded);
}

}  // namespace

ExportResult export_checkpoint(const ExportRequest& r) {
  STOKER_CHECK(!fs::is_directory(r.output), "export --output {} is a folder; name the file to write in it (e.g. {})",
               r.output.string(), (r.output / "model.onnx").string());
  const ExportFormat format = export_format(r.format, r.output);
  check_format_options(r, format);
  prepare_output(r.output);
  Export x;
  x.config = checkpoint_task_config(r.checkpoint, r.config_file, r.overrides);
  x.config.train.channels_last = false;  // plain contiguous tensors in the file
  x.channels = static_cast<int64_t>(x.config.data.mean.size());
  x.what = fmt::format("model.type {}", x.config.model.type());
  // A scripted model (model.type: torchscript) goes to TorchScript as its own script: no trace, no input size.
  const bool traced = format == ExportFormat::kOnnx ||
                      (format == ExportFormat::kTorchScript && x.config.model.type() != "torchscript");
  x.size = input_size_of(x.config, r, format, /*required=*/traced);
  const data::InputShape input{x.channels, x.size ? x.size->height : 0, x.size ? x.size->width : 0};
  x.model = load_checkpoint_model(x.config, r.checkpoint, r.use_ema, input, torch::kCPU);
  x.json = common_json(x, r, format);

  ExportResult out;
  out.format = format;
  out.model = r.output;
  out.metadata = fs::path(r.output.string() + ".json");
  if (format == ExportFormat::kStateDict) {
    models::weights::save_state_dict(*x.model->model.ptr(), r.output);
    out.summary = "a state dict (torch.save format)";
    if (!x.size) {
      logger().warn("export: the input size is unknown (no --input-size, and the recipe's test data is not there); "
                    "{} records input_size: null", out.metadata.string());
    }
  } else if (format == ExportFormat::kSafetensors) {
    float32_as_built(x.model->model, make_model(x.config, input));
    std::optional<std::pair<int64_t, int64_t>> size;
    if (x.size) size = std::make_pair(x.size->height, x.size->width);
    const HubExport hub = write_safetensors_export(*x.model->model.ptr(), x.config,
                                                    x.json["class_names"].get<std::vector<std::string>>(), size, r.output);
    out.summary = hub.summary + (hub.config.empty() ? "" : ", with " + hub.config.string());
  } else {
    float32_as_built(x.model->model, make_model(x.config, input));
    out.summary = format == ExportFormat::kOnnx ? export_onnx_file(x, r) : export_torchscript(x, r);
  }
  write_json(x, out.metadata);
  logger().info("exported {} ({}weights of {}) as {} to {}; {} beside it", x.what, r.use_ema ? "EMA " : "",
                r.checkpoint.string(), out.summary, r.output.string(), out.metadata.filename().string());
  return out;
}

}  // namespace stoker
