// The library side of `trainer eval`, `trainer predict` and `trainer export` (recipe/tasks.h).
#include "recipe/tasks.h"

#include <limits>

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include "common/error.h"
#include "common/log.h"
#include "data/normalize.h"
#include "data/pipeline.h"
#include "data/transform_options.h"
#include "models/state_dict.h"
#include "models/torchscript.h"
#include "optim/ema.h"
#include "recipe/device.h"
#include "recipe/factory.h"
#include "recipe/run.h"

namespace stoker {
namespace fs = std::filesystem;

// ---- trainer eval ---------------------------------------------------------------------------------

CheckpointEvaluation evaluate_checkpoint(const Config& config, const fs::path& checkpoint) {
  const torch::Device device = use_device(config.run.device);
  configure_threads(config.run.threads, config.data.workers, device.is_cpu());
  const std::shared_ptr<data::Loader> loader = make_loader(config, device, "test");
  torch::nn::AnyModule model = make_model(config, loader->channels());
  // A run's saved config names the precision it chose; a recipe's `auto` evaluates in float32.
  const Precision precision = config.train.precision == Precision::kAuto ? Precision::kFp32 : config.train.precision;
  apply_global_precision(precision);  // TF32 on or off, as the run's Trainer had it
  prepare_model(*model.ptr(), device, precision, config.train.channels_last);
  const CheckpointContent content = load_checkpoint(checkpoint, *model.ptr(), nullptr, device);
  model.ptr()->eval();
  const auto forward = [&](const torch::Tensor& x) { return forward_in_precision(model, x, device, precision); };

  CheckpointEvaluation out;
  out.state = content.state;
  out.model = evaluate_model(forward, *loader);
  if (!content.ema.empty()) {
    ModelEma ema(0.0);  // only holds the saved average
    ema.load(content.ema, content.ema_updates, *model.ptr(), checkpoint.string());
    EmaWeightsInModel swap(ema, *model.ptr());
    out.ema = evaluate_model(forward, *loader);
  }
  return out;
}

// ---- trainer predict ------------------------------------------------------------------------------

namespace {

template <typename Request>
Config predict_config(const Request& r) {
  if (r.config_file) return load_config(*r.config_file, r.overrides);
  const std::string yaml = read_checkpoint_config(r.checkpoint);
  STOKER_CHECK(!yaml.empty(), "checkpoint {} holds no config; pass the run's recipe with --config",
               r.checkpoint.string());
  return parse_config(yaml, r.checkpoint.string() + " (its saved config)", r.overrides);
}


// The configured model with the checkpoint's weights, or its EMA weights swapped in for as long as
// this lives; on the device in train.precision's parameter dtype, in eval mode.
struct PredictModel {
  torch::nn::AnyModule model;
  ModelEma ema{0.0};  // only holds the saved average
  std::optional<EmaWeightsInModel> ema_weights;
};

std::unique_ptr<PredictModel> load_model_for_predict(const Config& config, const PredictRequest& r,
                                                     int64_t channels, torch::Device device) {
  auto m = std::make_unique<PredictModel>();
  m->model = make_model(config, channels);
  prepare_model(*m->model.ptr(), device, config.train.precision, config.train.channels_last);
  const CheckpointContent content = load_checkpoint(r.checkpoint, *m->model.ptr(), nullptr, device);
  if (r.use_ema) {
    STOKER_CHECK(!content.ema.empty(),
                 "checkpoint {} has no EMA weights (its run had train.ema_decay: 0); leave out --ema",
                 r.checkpoint.string());
    m->ema.load(content.ema, content.ema_updates, *m->model.ptr(), r.checkpoint.string());
    m->ema_weights.emplace(m->ema, *m->model.ptr());
  }
  m->model.ptr()->eval();
  return m;
}

// The top k classes of a softmax over `logits` [1, C], named by `names` (by index) where it has them.
ImagePrediction top_classes(const torch::Tensor& logits, int64_t k, const fs::path& image,
                            const std::vector<std::string>& names) {
  const torch::Tensor probs = torch::softmax(logits.to(torch::kFloat32), 1)[0];
  const auto [values, indices] = probs.topk(std::min<int64_t>(k, probs.size(0)));
  const torch::Tensor v = values.cpu(), i = indices.cpu();
  ImagePrediction p;
  p.image = image;
  for (int64_t j = 0; j < v.size(0); ++j) {
    const int64_t c = i[j].item<int64_t>();
    p.classes.push_back(c);
    p.names.push_back(c < static_cast<int64_t>(names.size()) ? names[c] : std::to_string(c));
    p.probabilities.push_back(v[j].item<double>());
  }
  return p;
}

}  // namespace

std::vector<ImagePrediction> predict_images(const PredictRequest& r) {
  STOKER_CHECK(!r.images.empty(), "predict needs at least one image file");
  STOKER_CHECK(r.top_k >= 1, "predict: the number of classes to show must be at least 1, got {}", r.top_k);
  const Config config = predict_config(r);
  const auto channels = static_cast<int64_t>(config.data.mean.size());
  STOKER_CHECK(channels == 1 || channels == 3,
               "data.mean has {} values, so the model takes {} channels; predict decodes images to 1 "
               "(gray) or 3 (RGB)",
               channels, channels);
  const torch::Device device = use_device(config.run.device);  // issue 33, G25
  configure_threads(config.run.threads, 0, device.is_cpu());
  const std::unique_ptr<PredictModel> m = load_model_for_predict(config, r, channels, device);
  const std::vector<std::string> names = read_checkpoint_class_names(r.checkpoint);
  const Precision precision = config.train.precision;
  torch::NoGradGuard no_grad;

  // The same per-sample pipeline and normalisation as the loader's: read -> decode (only the region
  // the transforms need) -> data.eval_transforms -> normalise on the device.
  std::vector<std::string> files;
  for (const fs::path& path : r.images) files.push_back(path.string());
  const data::TransformPipeline transforms = data::make_transform_pipeline(data::eval_transforms_of(config.data));
  data::SamplePipeline pipeline(std::make_shared<data::ImageFilesDataset>(files, channels),
                                data::SamplePipelineOptions().set_transforms(transforms));
  const data::Normalizer normalize(channels, data::NormalizeOptions().set_mean(config.data.mean).set_std(config.data.std));
  data::SampleWork work;
  std::vector<ImagePrediction> out;
  for (size_t n = 0; n < files.size(); ++n) {
    pipeline.read(static_cast<int64_t>(n), work);
    pipeline.decode(config.run.seed, work);
    const data::SamplePlan& plan = work.plan;
    torch::Tensor pixels = torch::empty({1, plan.out_height, plan.out_width, channels}, torch::kUInt8);
    pipeline.transform(work, pixels.data_ptr<uint8_t>());
    const torch::Tensor input = normalize(pixels.to(device));
    out.push_back(top_classes(forward_in_precision(m->model, input, device, precision), r.top_k, r.images[n], names));
  }
  return out;
}

namespace {

// The recipe's input size {height, width}: its test split through data.eval_transforms, as the
// loader sizes its batches.
std::pair<int64_t, int64_t> recipe_input_size(const Config& config) {
  std::shared_ptr<data::Dataset> dataset;
  try {
    dataset = make_dataset(config, "test");
  } catch (const std::exception& e) {
    STOKER_FAIL("export --format torchscript traces the model on the recipe's input size, which comes from its test "
                "data: {}\nmake the data available (data.root, or --set data.root=...), or export --format state_dict",
                e.what());
  }
  const data::TransformPipeline transforms = data::make_transform_pipeline(data::eval_transforms_of(config.data));
  const data::SamplePipeline pipeline(dataset, data::SamplePipelineOptions().set_transforms(transforms));
  STOKER_CHECK(pipeline.fixed_output(),
               "export --format torchscript needs a fixed input size, and the test images vary in size with no "
               "fixed-size crop in data.eval_transforms; add one (e.g. a center_crop) or export --format state_dict");
  return {pipeline.out_height(), pipeline.out_width()};
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

// TorchScript of the checkpoint's (EMA) weights: on the CPU, float32 and contiguous (whatever the
// run's precision and channels-last: the file is for any consumer, and a bf16-true run's weights
// widen exactly), in eval mode, traced on the recipe's input size.
void export_torchscript(Config config, const ExportRequest& r) {
  config.train.channels_last = false;
  const auto channels = static_cast<int64_t>(config.data.mean.size());
  const auto [height, width] = recipe_input_size(config);
  PredictRequest load;
  load.checkpoint = r.checkpoint;
  load.use_ema = r.use_ema;
  const std::unique_ptr<PredictModel> m = load_model_for_predict(config, load, channels, torch::kCPU);
  torch::nn::AnyModule& model = m->model;
  float32_as_built(model, make_model(config, channels));
  // Normalised inputs are about N(0, 1); the check batch has another size than the traced one.
  torch::Generator generator = at::detail::createCPUGenerator(config.run.seed);
  const torch::Tensor example = at::randn({2, channels, height, width}, generator);
  const torch::Tensor check = at::randn({3, channels, height, width}, generator);
  const std::string what = fmt::format("model.type {}", config.model.type());
  torch::jit::Module traced = models::trace_to_torchscript(
      *model.ptr(), [&](const torch::Tensor& x) { return model.forward(x); }, example, check, what);
  traced.save(r.output.string());
  logger().info("exported {} ({}weights of {}) as TorchScript for input [N, {}, {}, {}] float32 to {}", what,
                r.use_ema ? "EMA " : "", r.checkpoint.string(), channels, height, width, r.output.string());
}

}  // namespace

void export_checkpoint(const ExportRequest& r) {
  STOKER_CHECK(r.format == "state_dict" || r.format == "torchscript",
               "export --format {}: unknown format; use torchscript or state_dict", r.format);
  STOKER_CHECK(!r.output.empty(), "export needs an output file (--output FILE)");
  Config config = predict_config(r);
  if (r.format == "torchscript") return export_torchscript(std::move(config), r);
  config.train.channels_last = false;  // plain contiguous tensors in the file
  PredictRequest load;
  load.checkpoint = r.checkpoint;
  load.use_ema = r.use_ema;
  const auto channels = static_cast<int64_t>(config.data.mean.size());
  const std::unique_ptr<PredictModel> m = load_model_for_predict(config, load, channels, torch::kCPU);
  models::save_state_dict(*m->model.ptr(), r.output);
}

}  // namespace stoker
