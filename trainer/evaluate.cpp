// Evaluation, epoch metrics by name, and the library side of `trainer eval` and `trainer predict`
// (see evaluate.h).
#include "trainer/evaluate.h"

#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>

#include <fmt/ranges.h>
#include <torch/torch.h>

#include "common/error.h"
#include "data/transform_options.h"
#include "data/decode.h"
#include "data/transforms.h"
#include "trainer/ema.h"
#include "trainer/run.h"

namespace stoker {
namespace fs = std::filesystem;

torch::Tensor count_topk_correct(const torch::Tensor& logits, const torch::Tensor& target, int64_t k) {
  STOKER_CHECK(logits.dim() == 2 && target.dim() == 1 && logits.size(0) == target.size(0) && k >= 1,
               "count_topk_correct: expected logits [N, C], target [N] and k >= 1; got {} and {}, k = {}",
               fmt::join(logits.sizes(), "x"), fmt::join(target.sizes(), "x"), k);
  const int64_t kk = std::min(k, logits.size(1));
  const torch::Tensor top = std::get<1>(logits.topk(kk, /*dim=*/1));
  return top.eq(target.unsqueeze(1)).any(1).sum();
}

EvalResult evaluate_model(const std::function<torch::Tensor(const torch::Tensor&)>& forward,
                          data::Loader& loader) {
  torch::NoGradGuard no_grad;
  loader.start_epoch(0);
  torch::Tensor loss_sum, top1, top5;
  int64_t samples = 0;
  while (std::optional<data::Batch> batch = loader.next()) {
    const torch::Tensor logits = forward(batch->input).to(torch::kFloat32);
    const torch::Tensor loss = torch::nn::functional::cross_entropy(
        logits, batch->target, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
    const torch::Tensor hits1 = count_topk_correct(logits, batch->target, 1);
    const torch::Tensor hits5 = count_topk_correct(logits, batch->target, 5);
    if (samples == 0) {
      loss_sum = loss;
      top1 = hits1;
      top5 = hits5;
    } else {
      loss_sum += loss;
      top1 += hits1;
      top5 += hits5;
    }
    samples += batch->size();
  }
  STOKER_CHECK(samples > 0, "the evaluation data gave no batches");
  EvalResult result;
  result.samples = samples;
  const auto n = static_cast<double>(samples);
  result.loss = loss_sum.item<double>() / n;
  result.top1 = static_cast<double>(top1.item<int64_t>()) / n;
  result.top5 = static_cast<double>(top5.item<int64_t>()) / n;
  return result;
}

double epoch_metric(const EpochResult& result, const std::string& name) {
  STOKER_CHECK(is_epoch_metric(name), "'{}' is not an epoch metric", name);
  const bool ema = name.rfind("ema_", 0) == 0;
  const EvalResult& r = ema ? result.ema_test : result.test;
  if (r.samples == 0) return std::numeric_limits<double>::quiet_NaN();
  const std::string base = ema ? name.substr(4) : name;
  if (base == "test_top1") return r.top1;
  if (base == "test_top5") return r.top5;
  return r.loss;
}

// ---- trainer eval ---------------------------------------------------------------------------------

CheckpointEvaluation evaluate_checkpoint(const Config& config, const fs::path& checkpoint) {
  const torch::Device device = resolve_device(config.run.device);
  configure_threads(config.run.threads, config.data.workers, device.is_cpu());
  const std::shared_ptr<data::Loader> loader = make_loader(config, device, "test");
  torch::nn::AnyModule model = make_model(config, loader->channels());
  model.ptr()->to(device);
  const CheckpointContent content = load_checkpoint(checkpoint, *model.ptr(), nullptr, device);
  model.ptr()->eval();
  const auto forward = [&](const torch::Tensor& x) { return model.forward(x); };

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

std::string read_image_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  STOKER_CHECK(in.good(), "cannot read image {}: {}", path.string(),
               fs::exists(path) ? (fs::is_directory(path) ? "it is a folder" : "permission denied")
                                : "no such file");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  STOKER_CHECK(!in.bad(), "cannot read image {}: read error", path.string());
  STOKER_CHECK(!bytes.empty(), "cannot read image {}: the file is empty", path.string());
  return bytes;
}

Config predict_config(const PredictRequest& r) {
  if (r.config_file) return load_config(*r.config_file, r.overrides);
  const std::string yaml = read_checkpoint_config(r.checkpoint);
  STOKER_CHECK(!yaml.empty(), "checkpoint {} holds no config; pass the run's recipe with --config",
               r.checkpoint.string());
  return parse_config(yaml, r.checkpoint.string() + " (its saved config)", r.overrides);
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
  const torch::Device device = resolve_device(config.run.device);
  configure_threads(config.run.threads, 0, device.is_cpu());

  torch::nn::AnyModule model = make_model(config, channels);
  model.ptr()->to(device);
  const CheckpointContent content = load_checkpoint(r.checkpoint, *model.ptr(), nullptr, device);
  ModelEma ema(0.0);  // only holds the saved average
  std::optional<EmaWeightsInModel> ema_weights;
  if (r.use_ema) {
    STOKER_CHECK(!content.ema.empty(),
                 "checkpoint {} has no EMA weights (its run had train.ema_decay: 0); leave out --ema",
                 r.checkpoint.string());
    ema.load(content.ema, content.ema_updates, *model.ptr(), r.checkpoint.string());
    ema_weights.emplace(ema, *model.ptr());
  }
  model.ptr()->eval();
  torch::NoGradGuard no_grad;

  const data::TransformPipeline pipeline(data::to_transform_specs(config.data.eval_transforms), "data.eval_transforms");
  const auto stats = [&](const std::vector<double>& v) {
    return torch::tensor(v, torch::kFloat32).view({1, channels, 1, 1}).to(device);
  };
  const torch::Tensor mean = stats(config.data.mean), std = stats(config.data.std);
  std::vector<ImagePrediction> out;
  for (const fs::path& path : r.images) {
    const std::string name = path.string();
    const std::string bytes = read_image_file(path);
    const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
    const data::ImageInfo info = data::probe_image(data, bytes.size(), name);
    data::SampleRng rng(config.run.seed);
    const data::SamplePlan plan = pipeline.plan(info.height, info.width, rng);
    const data::Region have = data::needed_region(plan, info.height, info.width);
    std::vector<uint8_t> pixels(static_cast<size_t>(plan.out_height * plan.out_width * channels), 0);
    if (have.width > 0 && have.height > 0) {
      // As the loader does: decode only the region, at the smallest scale that keeps the output size.
      data::DecodeOptions d;
      d.region = have;
      d.channels = static_cast<int>(channels);
      d.min_width = static_cast<int64_t>(std::ceil(double(plan.out_width) * have.width / plan.region.width));
      d.min_height = static_cast<int64_t>(std::ceil(double(plan.out_height) * have.height / plan.region.height));
      data::Image decoded;
      data::decode_image(data, bytes.size(), d, decoded, name);
      data::apply_plan(decoded, have, plan, pixels.data());
    }
    const torch::Tensor input = torch::from_blob(pixels.data(), {1, plan.out_height, plan.out_width, channels},
                                                 torch::kUInt8)
                                    .to(device)
                                    .permute({0, 3, 1, 2})
                                    .to(torch::kFloat32)
                                    .div_(255.0)
                                    .sub_(mean)
                                    .div_(std)
                                    .contiguous();
    const torch::Tensor probs = torch::softmax(model.forward(input).to(torch::kFloat32), 1)[0];
    const auto [values, indices] = probs.topk(std::min<int64_t>(r.top_k, probs.size(0)));
    const torch::Tensor v = values.cpu(), i = indices.cpu();
    ImagePrediction p;
    p.image = path;
    for (int64_t j = 0; j < v.size(0); ++j) {
      p.classes.push_back(i[j].item<int64_t>());
      p.probabilities.push_back(v[j].item<double>());
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace stoker
