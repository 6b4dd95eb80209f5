// embed_example: Stoker as a library inside an application that brings its own model and data.
//
// 1. A data set: the application's own class implementing stoker::data::Dataset (here generated
//    images of a horizontal or a vertical bar in noise: a two-class problem).
// 2. A model: the application's own torch::nn::Module (a one-layer CNN).
// 3. Both registered by name with their own options, so that the YAML config selects them with
//    `data.type: bars` and `model.type: bar_net` and sets their keys (`data.bars.side`,
//    `model.filters`), checked like Stoker's own: a key bar_net does not have is an error.
// 4. The whole set-up from the config in one call (stoker::make_training: device, threads, loaders,
//    model, Trainer), with a callback that prints each epoch, trained for a few epochs.
// 5. The shortest way in: the application's own model on tensors it already holds
//    (stoker::data::TensorBatches), no evaluation source, four lines at the call site.
// 6. Its own batch operation and metrics sink, registered like the model and configured from YAML
//    like Stoker's own (`data.batch_ops: [{type: bar_noise, std: 0.1}]`, `logging.sinks: [...,
//    {type: epoch_csv, file: epochs.csv}]`), in a whole run (stoker::run_training: run directory,
//    log, metrics, checkpoints).
// The program exits 0 only when the network has learned each time (test accuracy well above the 50%
// of guessing) and the sink wrote its file.
//
//   embed_example [key.path=value]...    e.g. embed_example train.epochs=5 model.filters=32
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "common/error.h"           // stoker::Error, STOKER_FAIL
#include "common/options.h"         // stoker::TypeOptionsOf, OptionsVisitor, rules (own config keys)
#include "data/batch_ops.h"         // stoker::data::batch_op_registry(), BatchOp
#include "data/dataset.h"           // stoker::data::Dataset, dataset_registry()
#include "data/loader.h"            // stoker::data::Batch
#include "data/random.h"            // stoker::data::mix_seed
#include "data/tensor_batches.h"    // stoker::data::TensorBatches (batches of in-memory tensors)
#include "models/registry.h"        // stoker::models::model_registry(), model_type, create_model
#include "observe/sinks.h"          // stoker::sink_registry(), SinkContext, MetricsSink
#include "recipe/config.h"          // stoker::Config, parse_config
#include "recipe/factory.h"         // stoker::make_training, make_trainer (the parts from the config)
#include "recipe/run.h"             // stoker::run_training (a whole run with its directory)
#include "trainer/evaluate.h"       // stoker::evaluate_model
#include "trainer/trainer.h"        // stoker::Trainer, stoker::Callback

namespace {

// ---- 1. the data set ----------------------------------------------------------------------------
// Grey side x side images: noise plus one bright line, a row (class 0) or a column (class 1), at a
// random place. Sample i is a pure function of (seed, split, i), as Stoker's loader expects: it may
// read samples in any order, from several threads.
// Its own keys, under `data.bars:` in the config: declared once here, with their checks; the config
// reader validates them, prints them with --print-config and rejects keys bars does not have.
struct BarsOptions : stoker::TypeOptionsOf<BarsOptions> {
  int64_t train_samples = 2000;
  int64_t test_samples = 1000;
  int64_t side = 12;  // images are side x side pixels
  void visit(stoker::OptionsVisitor& v) override {
    v.field("train_samples", train_samples, stoker::rules::at_least(1));
    v.field("test_samples", test_samples, stoker::rules::at_least(1));
    v.field("side", side, stoker::rules::at_least(4));
  }
};

class BarsDataset : public stoker::data::Dataset {
 public:
  // `options` holds what every data set gets from the `data:` section (split, num_classes, limit,
  // run.seed) and, in options.own, the BarsOptions read from `data.bars:`.
  explicit BarsDataset(const stoker::data::DatasetOptions& options)
      : samples_(options.split == "train" ? options.own.as<BarsOptions>().train_samples
                                          : options.own.as<BarsOptions>().test_samples),
        side_(options.own.as<BarsOptions>().side),
        seed_(stoker::data::mix_seed(options.seed, options.split == "train" ? 1 : 2)) {
    if (options.num_classes != 2) STOKER_FAIL("bars has 2 classes; set data.num_classes: 2, not {}", options.num_classes);
    if (options.limit > 0 && options.limit < samples_) samples_ = options.limit;
  }

  int64_t size() const override { return samples_; }
  int64_t num_classes() const override { return 2; }
  int64_t channels() const override { return 1; }
  int64_t height() const override { return side_; }
  int64_t width() const override { return side_; }

  void read(int64_t index, stoker::data::RawSample& out) const override {
    std::mt19937_64 rng(stoker::data::mix_seed(seed_, static_cast<uint64_t>(index)));
    std::uniform_int_distribution<int> noise(0, 120), place(0, static_cast<int>(side_) - 1);
    out.encoded = false;  // already pixels: no decoding stage
    out.label = index % 2;
    stoker::data::Image& image = out.image;
    image.height = image.width = side_;
    image.channels = 1;
    image.pixels.resize(side_ * side_);
    for (uint8_t& p : image.pixels) p = static_cast<uint8_t>(noise(rng));
    const int64_t line = place(rng);
    for (int64_t k = 0; k < side_; ++k) {
      const int64_t y = out.label == 0 ? line : k, x = out.label == 0 ? k : line;
      image.pixels[y * side_ + x] += 110;
    }
  }

  std::string describe(int64_t index) const override { return "bars[" + std::to_string(index) + "]"; }

 private:
  int64_t samples_, side_;
  uint64_t seed_;
};

// ---- 2. the model ---------------------------------------------------------------------------------
// One 3x3 convolution, the strongest response of each filter anywhere in the image, a linear
// classifier. Any module with `Tensor forward(const Tensor&)` can be trained by Stoker.
struct BarNetImpl : torch::nn::Module {
  BarNetImpl(int64_t in_channels, int64_t filters, int64_t num_classes)
      : conv(register_module(
            "conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(in_channels, filters, 3).padding(1)))),
        fc(register_module("fc", torch::nn::Linear(filters, num_classes))) {}

  torch::Tensor forward(const torch::Tensor& x) {
    return fc(torch::relu(conv(x)).amax({2, 3}));  // [B, C, H, W] -> [B, C] -> [B, classes]
  }

  torch::nn::Conv2d conv;
  torch::nn::Linear fc;
};
TORCH_MODULE(BarNet);

// bar_net's own keys, beside `type` in the `model:` section.
struct BarNetOptions : stoker::TypeOptionsOf<BarNetOptions> {
  int64_t filters = 8;
  void visit(stoker::OptionsVisitor& v) override { v.field("filters", filters, stoker::rules::at_least(1)); }
};

// The recipe. It could as well be a file (stoker::load_config); every key not given keeps its
// default, and unknown keys or values are rejected here, before any work.
constexpr const char* kConfig = R"(
run: {seed: 7, device: auto}
data:
  type: bars                # the data set registered below
  num_classes: 2
  batch_size: 32
  eval_batch_size: 500
  mean: [0.35]              # per channel, on the 0..1 scale
  std: [0.2]
  bars: {train_samples: 2000, test_samples: 1000, side: 12}   # bars' own keys (BarsOptions)
model:
  type: bar_net             # the model registered below
  filters: 8                # bar_net's own key (BarNetOptions)
optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
schedule: {type: cosine}
train: {epochs: 3}
)";

constexpr double kMustReach = 0.80;  // test accuracy that counts as "learned" (chance: 0.50)

// ---- 3. register the application's parts by name, before the config names them -------------------
void register_parts() {
  stoker::data::dataset_registry().add(
      "bars", {stoker::options_of<BarsOptions>(), [](const stoker::data::DatasetOptions& options) {
                 return std::make_shared<BarsDataset>(options);
               }});
  stoker::models::model_registry().add(
      "bar_net", stoker::models::model_type<BarNetOptions>(
                     [](const BarNetOptions& o, const stoker::models::ModelShape& shape) {
                       return BarNet(shape.in_channels, o.filters, shape.num_classes);
                     }));
}

// ---- 4. everything the config describes, in one call: device, threads, seed, the registered data
// set's loaders, the registered model and a Trainer with the config's optimizer, loss, schedule and
// precision (stoker::run_training adds a run directory, logs, metrics and checkpoints), with a callback.
//
// Callbacks see every step and epoch; Stoker's own logging, metrics and checkpoints are callbacks
// too (trainer/callbacks.h), and run_training() adds them. Here the application prints its own line.
class PrintEpochs : public stoker::Callback {
 public:
  void on_epoch_end(stoker::Trainer& trainer, const stoker::EpochResult& r) override {
    std::printf("epoch %lld/%lld: train loss %.4f, test loss %.4f, test accuracy %.1f%% (%.0f samples/s)\n",
                static_cast<long long>(r.epoch + 1),
                static_cast<long long>(trainer.options().epochs), r.train_loss, r.test.loss,
                100.0 * r.test.top1, r.samples_per_s);
    std::fflush(stdout);
  }
};

// Whether it learned; `device` receives the device the run's plan chose.
bool train_registered_parts(const stoker::Config& config, torch::Device& device) {
  stoker::TrainingSetup setup = stoker::make_training(config);
  device = setup.plan.device;
  setup.trainer->add_callback(std::make_shared<PrintEpochs>());
  const stoker::FitResult result = setup.trainer->fit();
  const double accuracy = result.epochs.empty() ? 0.0 : result.epochs.back().test.top1;
  std::printf("registered parts: test accuracy %.1f%% after %zu epoch(s) in %.1f s: %s\n", 100.0 * accuracy,
              result.epochs.size(), result.seconds, accuracy >= kMustReach ? "learned" : "did NOT learn");
  return accuracy >= kMustReach;
}

// ---- 5. the application's own model on tensors it holds, no evaluation source -------------------
// `n` bars images as normalised float tensors [n, 1, side, side] and their labels: an application's
// own data, already in memory (drawn by BarsDataset here, to have something learnable).
std::pair<torch::Tensor, torch::Tensor> bars_tensors(int64_t n, int64_t side, uint64_t seed) {
  stoker::data::DatasetOptions options;
  options.split = "train";
  options.num_classes = 2;
  options.seed = seed;
  BarsOptions own;
  own.train_samples = n;
  own.side = side;
  options.own = stoker::TypedOptions("bars", std::make_unique<BarsOptions>(own));
  const BarsDataset bars(options);
  torch::Tensor images = torch::empty({n, 1, side, side});
  torch::Tensor labels = torch::empty({n}, torch::kLong);
  stoker::data::RawSample sample;
  for (int64_t i = 0; i < n; ++i) {
    bars.read(i, sample);
    images[i][0] = torch::tensor(std::vector<float>(sample.image.pixels.begin(), sample.image.pixels.end()))
                       .view({side, side}) / 255.0;
    labels[i] = sample.label;
  }
  return {(images - 0.35) / 0.2, labels};
}

bool train_on_tensors(const stoker::Config& config, const torch::Device& device) {
  auto [images, labels] = bars_tensors(2000, 12, /*seed=*/3);
  auto data = std::make_shared<stoker::data::TensorBatches>(images, labels, 32, device);
  auto trainer = stoker::make_trainer(config, torch::nn::AnyModule(BarNet(1, 8, 2)), data, nullptr, device);
  trainer->fit();
  // (Evaluated here by hand on fresh tensors: the Trainer had no evaluation source.)
  auto [test_images, test_labels] = bars_tensors(1000, 12, /*seed=*/4);
  stoker::data::TensorBatches test(test_images, test_labels, 500, device, /*shuffle=*/false);
  trainer->module().eval();
  const auto forward = [&](const torch::Tensor& x) { return trainer->forward(x); };
  const double accuracy = stoker::evaluate_model(forward, test).top1;
  std::printf("in-memory tensors: test accuracy %.1f%%: %s\n", 100.0 * accuracy,
              accuracy >= kMustReach ? "learned" : "did NOT learn");
  return accuracy >= kMustReach;
}

// ---- 6. the application's batch operation and metrics sink, configured from YAML, in a whole run ---
// bar_noise adds Gaussian noise of `std` to every normalised training batch, on the device, drawn
// from the batch's own seed (so that a resumed run sees the same noise).
struct BarNoiseOptions : stoker::TypeOptionsOf<BarNoiseOptions> {
  double std = 0.1;
  void visit(stoker::OptionsVisitor& v) override { v.field("std", std, stoker::rules::non_negative()); }
};
stoker::data::BatchOp bar_noise(const stoker::TypedOptions& o, const stoker::data::BatchOpContext& context) {
  const double std = o.as<BarNoiseOptions>().std;
  const uint64_t seed = context.seed;
  return [std, seed](stoker::data::Batch& batch, int64_t epoch) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(
        stoker::data::mix_seed(seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(batch.index)));
    const torch::Tensor noise = at::normal(0.0, std, batch.input.sizes(), gen);
    batch.input = batch.input + noise.to(batch.input.device(), batch.input.scalar_type());
  };
}

// epoch_csv writes one line per epoch (epoch, test top-1) to `file` in the run directory.
struct EpochCsvOptions : stoker::TypeOptionsOf<EpochCsvOptions> {
  std::string file = "epochs.csv";
  void visit(stoker::OptionsVisitor& v) override { v.field("file", file, stoker::rules::non_empty()); }
};
class EpochCsv : public stoker::MetricsSink {
 public:
  explicit EpochCsv(const std::filesystem::path& path) : out_(path) {}
  void step(const stoker::StepRecord&) override {}
  void epoch(const stoker::EpochRecord& r) override {
    out_ << r.result.epoch + 1 << "," << r.result.test.top1 << "\n" << std::flush;
  }

 private:
  std::ofstream out_;
};

// Registers bar_noise and epoch_csv and runs the recipe with them; whether it learned and the sink
// wrote one line per epoch.
bool run_with_own_batch_op_and_sink() {
  const auto describe_noise = [](const stoker::TypedOptions& o, const auto&) {
    return "noise of std " + std::to_string(o.as<BarNoiseOptions>().std);
  };
  stoker::data::batch_op_registry().add("bar_noise", {stoker::options_of<BarNoiseOptions>(), bar_noise, describe_noise});
  stoker::sink_registry().add("epoch_csv", {stoker::options_of<EpochCsvOptions>(),
                                            [](const stoker::TypedOptions& o, const stoker::SinkContext& c) {
                                              return std::make_shared<EpochCsv>(c.run_dir / o.as<EpochCsvOptions>().file);
                                            }});
  const std::filesystem::path runs = std::filesystem::temp_directory_path() / "stoker_embed_example_runs";
  stoker::TrainRequest request;
  request.config = stoker::parse_config(kConfig, "embed_example",
                                        {"data.batch_ops=[{type: bar_noise, std: 0.1}]",
                                         "logging.sinks=[{type: metrics_file}, {type: epoch_csv, file: epochs.csv}]",
                                         "run.dir=" + runs.string(), "train.epochs=2"});
  const stoker::TrainOutcome run = stoker::run_training(request);
  std::ifstream csv(run.run_dir / "epochs.csv");
  int lines = 0;
  for (std::string line; std::getline(csv, line);) ++lines;
  std::filesystem::remove_all(runs);
  const bool ok = run.final_test.top1 >= kMustReach && lines == 2;
  std::printf("own batch operation and sink: test accuracy %.1f%%, epochs.csv has %d line(s): %s\n",
              100.0 * run.final_test.top1, lines, ok ? "ok" : "NOT ok");
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    register_parts();
    // The config, with the command line's key.path=value overrides applied and checked.
    const stoker::Config config =
        stoker::parse_config(kConfig, "embed_example", std::vector<std::string>(argv + 1, argv + argc));
    torch::Device device(torch::kCPU);
    const bool learned = train_registered_parts(config, device);
    const bool learned_in_memory = train_on_tensors(config, device);
    const bool own_parts = run_with_own_batch_op_and_sink();
    return learned && learned_in_memory && own_parts ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
