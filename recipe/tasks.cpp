// The library side of `trainer eval` and `trainer predict`, and the loading of a checkpoint's model
// (recipe/tasks.h).
#include "recipe/tasks.h"

#include <limits>

#include <fmt/ranges.h>
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include "common/error.h"
#include "common/log.h"
#include "data/normalize.h"
#include "data/pipeline.h"
#include "data/transform_options.h"
#include "optim/ema.h"
#include "recipe/device.h"
#include "recipe/factory.h"
#include "recipe/run.h"

namespace stoker {
namespace fs = std::filesystem;

// ---- shared by the tasks on a checkpoint ------------------------------------------------------

namespace {

// The model section of a config as one line of YAML ("{type: resnet18, drop_path_rate: 0}").
std::string model_yaml(const Config& config) {
  YAML::Node model = YAML::Load(config_to_yaml(config))["model"];
  model.SetStyle(YAML::EmitterStyle::Flow);
  YAML::Emitter out;
  out << model;
  return out.c_str();
}

// The config saved in `checkpoint`, or nothing when it has none or it no longer reads.
std::optional<Config> saved_config(const fs::path& checkpoint) {
  const std::string yaml = read_checkpoint_config(checkpoint);
  if (yaml.empty()) return std::nullopt;
  try {
    return parse_config(yaml, checkpoint.string() + " (its saved config)");
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// A config that names another model.type than the checkpoint was trained as: an error naming both.
void check_model_type(const Config& config, const std::string& config_name, const fs::path& checkpoint) {
  const std::optional<Config> trained = saved_config(checkpoint);
  if (!trained || trained->model.type() == config.model.type()) return;
  STOKER_FAIL("checkpoint {} holds a {} (model.type in its saved config), but {} names model.type {}; pass the "
              "recipe it was trained with, or leave out --config (the checkpoint holds its own), or pick a "
              "checkpoint of a {} run",
              checkpoint.string(), trained->model.type(), config_name, config.model.type(), config.model.type());
}

}  // namespace

Config checkpoint_task_config(const fs::path& checkpoint, const std::optional<fs::path>& config_file,
                              const std::vector<std::string>& overrides) {
  if (config_file) {
    Config config = load_config(*config_file, overrides);
    check_model_type(config, "--config " + config_file->string(), checkpoint);
    // A recipe that leaves data.num_classes to the data: the checkpoint's run knew it.
    if (config.data.num_classes == 0) {
      const std::optional<Config> trained = saved_config(checkpoint);
      const std::vector<std::string> names = read_checkpoint_class_names(checkpoint);
      config.data.num_classes = trained && trained->data.num_classes > 0 ? trained->data.num_classes
                                                                          : static_cast<int64_t>(names.size());
    }
    return config;
  }
  const std::string yaml = read_checkpoint_config(checkpoint);
  STOKER_CHECK(!yaml.empty(), "checkpoint {} holds no config; pass the run's recipe with --config",
               checkpoint.string());
  return parse_config(yaml, checkpoint.string() + " (its saved config)", overrides);
}

std::unique_ptr<CheckpointModel> load_checkpoint_model(const Config& config, const fs::path& checkpoint, bool use_ema,
                                                       const data::InputShape& input, torch::Device device) {
  auto m = std::make_unique<CheckpointModel>();
  m->model = make_model(config, input);
  prepare_model(*m->model.ptr(), device, config.train.precision, config.train.channels_last);
  CheckpointContent content;
  try {
    content = load_checkpoint(checkpoint, *m->model.ptr(), nullptr, device);
  } catch (const Error& e) {
    const std::optional<Config> trained = saved_config(checkpoint);
    if (!trained || model_yaml(*trained) == model_yaml(config)) throw;
    STOKER_FAIL("{}\nthe checkpoint's model: {}\nthe config's model:     {}", e.what(), model_yaml(*trained),
                model_yaml(config));
  }
  if (use_ema) {
    STOKER_CHECK(!content.ema.empty(),
                 "checkpoint {} has no EMA weights (its run had train.ema_decay: 0); leave out --ema",
                 checkpoint.string());
    m->ema.load(content.ema, content.ema_updates, *m->model.ptr(), checkpoint.string());
    m->ema_weights.emplace(m->ema, *m->model.ptr());
  }
  m->model.ptr()->eval();
  return m;
}

// ---- trainer eval ---------------------------------------------------------------------------------

CheckpointEvaluation evaluate_checkpoint(const Config& recipe, const fs::path& checkpoint) {
  check_model_type(recipe, "the config", checkpoint);
  const torch::Device device = use_device(recipe.run.device);
  configure_threads(recipe.run.threads, recipe.data.workers, device.is_cpu());
  // The test split labelled as the checkpoint's run was (its class names), never by folder position.
  Config config = recipe;
  const std::vector<std::string> classes = read_checkpoint_class_names(checkpoint);
  std::shared_ptr<data::Dataset> test = make_dataset(config, "test", classes, "the checkpoint " + checkpoint.string());
  if (config.data.num_classes == 0) config.data.num_classes = test->num_classes();
  DataRanks alone;
  const std::shared_ptr<data::Loader> loader = make_loader(config, std::move(test), device, "test", false, alone);
  torch::nn::AnyModule model = make_model(config, loader->shape());
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
  const Config config = checkpoint_task_config(r.checkpoint, r.config_file, r.overrides);
  const auto channels = static_cast<int64_t>(config.data.mean.size());
  STOKER_CHECK(channels == 1 || channels == 3,
               "data.mean has {} values, so the model takes {} channels; predict decodes images to 1 "
               "(gray) or 3 (RGB)",
               channels, channels);
  const torch::Device device = use_device(config.run.device);  // issue 33, G25
  configure_threads(config.run.threads, 0, device.is_cpu());
  const std::unique_ptr<CheckpointModel> m =
      load_checkpoint_model(config, r.checkpoint, r.use_ema, {channels, 0, 0}, device);
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

}  // namespace stoker
