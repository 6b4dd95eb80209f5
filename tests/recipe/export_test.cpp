// `trainer export --format torchscript` of real checkpoints (compact_resnet with its EMA weights,
// torchvision-layout resnet18, efficientnet_b0 and mobilenet_v3_small on a small input; a bf16-true
// channels-last run, which exports float32 weights): the file loads with torch::jit::load in C++ and
// (suite ExportPython) torch.jit.load in Python, whose logits equal the C++ model's and whose
// softmax equals `trainer predict`'s probabilities on the same image.
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "optim/ema.h"
#include "test_config.h"
#include "trainer/checkpoint.h"
#include "recipe/export.h"
#include "recipe/tasks.h"
#include "recipe/factory.h"
#include "recipe/run.h"

namespace stoker {
namespace {
namespace fs = std::filesystem;

// Both sides run the same float32 CPU kernels on the same tensors; the only difference allowed for
// is the loader's folded normalisation ((x - 255 mean) / (255 std)) against the test's
// (x / 255 - mean) / std, about 1e-7 relative, and summation order.
constexpr double kLogitTolerance = 1e-5;       // max |difference| / max(1, max |logit|)
constexpr double kProbabilityTolerance = 1e-5;  // max |difference| of softmax probabilities

double max_relative_difference(const torch::Tensor& got, const torch::Tensor& want) {
  return (got.to(torch::kFloat64) - want.to(torch::kFloat64)).abs().max().item<double>() /
         std::max(1.0, want.abs().max().item<double>());
}

struct TrainedRun {
  Config config;
  fs::path checkpoint;
};

// One epoch of `model_type` on 12x12 gray synthetic data (with an EMA when ema_decay > 0).
TrainedRun train(const fs::path& data, const fs::path& runs, const TypedOptions& model, double ema_decay) {
  TrainRequest request;
  request.config = testing::tiny_config(data, runs);
  request.config.model = model;
  request.config.train.epochs = 1;
  request.config.train.ema_decay = ema_decay;
  const TrainOutcome out = run_training(request);
  return {request.config, out.run_dir / "checkpoints" / "last.pt"};
}

// The checkpoint's model (or EMA) weights in the C++ model, eval mode, on `input`.
torch::Tensor eager_logits(const TrainedRun& run, bool ema, const torch::Tensor& input) {
  torch::nn::AnyModule model = make_model(run.config, {1});
  const CheckpointContent content = load_checkpoint(run.checkpoint, *model.ptr(), nullptr, torch::kCPU);
  ModelEma average(0.0);
  if (ema) average.load(content.ema, content.ema_updates, *model.ptr(), run.checkpoint.string());
  EmaWeightsInModel swap(average, *model.ptr());
  model.ptr()->eval();
  torch::NoGradGuard no_grad;
  return model.forward(input);
}

fs::path export_torchscript(const TrainedRun& run, bool ema, const fs::path& output) {
  ExportRequest e;
  e.checkpoint = run.checkpoint;
  e.format = "torchscript";
  e.use_ema = ema;
  e.output = output;
  export_checkpoint(e);
  return output;
}

// A 12x12 gray test image, and the model's input for it (as the loader normalises it: mean 0.5,
// std 0.3) followed by two random rows.
struct TestImage {
  fs::path file;
  torch::Tensor input;  // [3, 1, 12, 12], row 0 the image's
};
TestImage make_test_image(const fs::path& dir) {
  std::vector<uint8_t> pixels(12 * 12);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>((i * 53 + 17) % 256);
  TestImage t{dir / "probe.png", {}};
  testing::write_png(t.file, 12, 12, 1, pixels);
  const torch::Tensor image = torch::tensor(std::vector<float>(pixels.begin(), pixels.end())).reshape({1, 1, 12, 12});
  torch::manual_seed(11);
  t.input = torch::cat({(image / 255 - 0.5) / 0.3, torch::randn({2, 1, 12, 12})}).contiguous();
  return t;
}

// A bf16-true, channels-last run exports float32, contiguous weights (integer buffers stay int64)
// that torch::jit::load runs; without the recipe's data there is no input size to trace on, and the
// error says so.
TEST(Export, Bf16ChannelsLastRunExportsFloat32AndMissingDataIsAClearError) {
  testing::TempDir data, runs;
  testing::write_synthetic_idx_dataset(data.path(), 64, 32, 12);
  TrainRequest request;
  request.config = testing::tiny_config(data.path(), runs.path());
  request.config.train.epochs = 1;
  request.config.train.precision = parse_precision("bf16-true");
  request.config.train.channels_last = true;
  const TrainedRun run{request.config, run_training(request).run_dir / "checkpoints" / "last.pt"};
  torch::jit::Module loaded = torch::jit::load(export_torchscript(run, false, runs.path() / "bf16.pt").string());
  for (const auto& p : loaded.named_parameters()) {
    EXPECT_EQ(p.value.scalar_type(), torch::kFloat32) << p.name;
    EXPECT_TRUE(p.value.is_contiguous()) << p.name;
  }
  for (const auto& b : loaded.named_buffers()) {
    const bool counter = b.name.find("num_batches_tracked") != std::string::npos;
    EXPECT_EQ(b.value.scalar_type(), counter ? torch::kInt64 : torch::kFloat32) << b.name;
  }
  loaded.eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor logits = loaded.forward({torch::randn({5, 1, 12, 12})}).toTensor();
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{5, 10}));
  EXPECT_TRUE(torch::isfinite(logits).all().item<bool>());

  ExportRequest e;
  e.checkpoint = run.checkpoint;
  e.format = "torchscript";
  e.output = runs.path() / "x.pt";
  e.overrides = {"data.root=" + (runs.path() / "nowhere").string()};
  const std::string error = testing::error_of([&] { export_checkpoint(e); });
  EXPECT_CONTAINS(error, "export --format torchscript needs the model's input size, which comes from --input-size HxW "
                         "or the recipe's test data");
  EXPECT_CONTAINS(error, "give --input-size HxW, or make the data available");
  EXPECT_FALSE(fs::exists(e.output));

  // --input-size needs no data; the file carries the JSON written beside it as its extra file.
  e.input_size = InputSize{12, 12};
  const ExportResult out = export_checkpoint(e);
  EXPECT_EQ(out.metadata, fs::path(e.output.string() + ".json"));
  torch::jit::ExtraFilesMap extra{{"stoker.json", ""}};
  torch::jit::load(e.output.string(), torch::kCPU, extra);
  const std::string beside = testing::read_bytes(out.metadata);
  EXPECT_EQ(extra["stoker.json"] + "\n", beside);
  for (const char* entry : {"\"format\": \"torchscript\"", "\"input_size\": [\n    12,\n    12\n  ]", "\"channels\": 1",
                            "\"mean\": [\n    0.5\n  ]", "\"class_names\": [\n    \"0\",", "\"model_type\": \"compact_resnet\""}) {
    EXPECT_CONTAINS(beside, entry);
  }
}

TEST(Export, TheFormatComesFromTheExtensionOrIsNamedAndMustAgree) {
  EXPECT_EQ(export_format("", "m.onnx"), ExportFormat::kOnnx);
  EXPECT_EQ(export_format("", "m.ts"), ExportFormat::kTorchScript);
  EXPECT_EQ(export_format("", "m.torchscript"), ExportFormat::kTorchScript);
  EXPECT_EQ(export_format("", "m.pth"), ExportFormat::kStateDict);
  EXPECT_EQ(export_format("torchscript", "m.pt"), ExportFormat::kTorchScript);
  EXPECT_EQ(export_format("state_dict", "m.pt"), ExportFormat::kStateDict);
  EXPECT_EQ(export_format("onnx", "m.bin"), ExportFormat::kOnnx);
  EXPECT_CONTAINS(testing::error_of([] { export_format("", "m.pt"); }),
                  "export --output m.pt: a .pt file may be TorchScript or a state dict; give --format torchscript or "
                  "--format state_dict, or name the file .ts (TorchScript) or .pth (state dict)");
  EXPECT_CONTAINS(testing::error_of([] { export_format("", "model"); }), "the extension does not say the format");
  EXPECT_CONTAINS(testing::error_of([] { export_format("state_dict", "m.onnx"); }),
                  "export --format state_dict --output m.onnx: a .onnx file holds onnx, not state_dict");
  EXPECT_CONTAINS(testing::error_of([] { export_format("onnx", "m.pt"); }), "a .pt file holds torchscript, not onnx");
  EXPECT_CONTAINS(testing::error_of([] { export_format("tflite", "m.onnx"); }), "export --format tflite: unknown format");
}

TEST(Export, InputSizeReadsHxWOrOneNumber) {
  EXPECT_EQ(parse_input_size("224x160").height, 224);
  EXPECT_EQ(parse_input_size("224x160").width, 160);
  EXPECT_EQ(parse_input_size("32").width, 32);
  for (const char* bad : {"", "x", "224x", "0x3", "12.5", "12x12x3", "-4", "big"}) {
    EXPECT_CONTAINS(testing::error_of([&] { parse_input_size(bad); }), "give HxW (e.g. 224x224) or one number") << bad;
  }
}

// Before any work: the output's folder is made; a folder as the output, options of another format
// and a checkpoint of another architecture than the config names are errors that name both sides.
TEST(Export, OutputFolderOptionsAndArchitectureAreCheckedFirst) {
  testing::TempDir data, runs;
  testing::write_synthetic_idx_dataset(data.path(), 64, 32, 12);
  const TrainedRun run = train(data.path(), runs.path(), testing::tiny_config("", "").model, 0.0);
  ExportRequest e;
  e.checkpoint = run.checkpoint;
  e.output = runs.path() / "deploy" / "v1" / "model.onnx";
  e.dynamic_batch = true;
  export_checkpoint(e);
  EXPECT_TRUE(fs::exists(e.output));
  EXPECT_TRUE(fs::exists(e.output.string() + ".json"));

  e.output = runs.path() / "deploy";
  EXPECT_CONTAINS(testing::error_of([&] { export_checkpoint(e); }), "is a folder; name the file to write in it");
  e.output = runs.path() / "model.ts";
  const std::string options = testing::error_of([&] { export_checkpoint(e); });
  EXPECT_CONTAINS(options, "export: --dynamic-batch applies to ONNX exports only, and this one writes torchscript");
  e.dynamic_batch = false;
  e.output = runs.path() / "model.onnx";
  e.opset = 99;
  EXPECT_CONTAINS(testing::error_of([&] { export_checkpoint(e); }), "export --opset 99: Stoker writes ONNX opsets 13 to");
  e.opset.reset();

  const fs::path recipe = runs.path() / "resnet.yaml";
  std::ofstream(recipe) << "data: {root: \"" << data.path().string() << "\", mean: [0.5], std: [0.3]}\nmodel: {type: resnet18}\n";
  e.config_file = recipe;
  const std::string other = testing::error_of([&] { export_checkpoint(e); });
  EXPECT_CONTAINS(other, "holds a compact_resnet (model.type in its saved config), but --config " + recipe.string() +
                             " names model.type resnet18");
  e.config_file.reset();
  e.overrides = {"model.widths=[8,24]"};
  const std::string widths = testing::error_of([&] { export_checkpoint(e); });
  EXPECT_CONTAINS(widths, "but the model expects");
  EXPECT_CONTAINS(widths, "the checkpoint's model: {type: compact_resnet, widths: [8, 16]");
  EXPECT_CONTAINS(widths, "the config's model:     {type: compact_resnet, widths: [8, 24]");
  EXPECT_FALSE(fs::exists(e.output));
}

class ExportPython : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    python_ = testing::venv_python(&why);
    if (python_.empty()) GTEST_SKIP() << why;
    script_ = fs::path(STOKER_SOURCE_DIR) / "tests/recipe/torchscript_run.py";
    ASSERT_TRUE(fs::exists(script_)) << script_;
    testing::write_synthetic_idx_dataset(data_.path(), 64, 32, 12);
  }

  // Python's torch.jit.load(model) on `input`: its logits, and its state_dict's names in `names`.
  torch::Tensor python_logits(const fs::path& model, const torch::Tensor& input, std::vector<std::string>* names) {
    const fs::path in = runs_.path() / "input.f32", out = runs_.path() / "py";
    fs::create_directories(out);
    std::ofstream(in, std::ios::binary)
        .write(static_cast<const char*>(input.data_ptr()), static_cast<std::streamsize>(input.nbytes()));
    const std::string shape = fmt::format("{}", fmt::join(input.sizes(), ","));
    const fs::path log = runs_.path() / "python.log";
    const int status = testing::shell("'" + python_.string() + "' '" + script_.string() + "' '" + model.string() + "' '" +
                                      in.string() + "' " + shape + " '" + out.string() + "' >'" + log.string() + "' 2>&1");
    EXPECT_EQ(status, 0) << testing::read_bytes(log);
    std::vector<double> values;
    std::ifstream logits(out / "logits.txt");
    for (double v = 0; logits >> v;) values.push_back(v);
    std::ifstream dict(out / "state_dict.txt");
    names->clear();
    for (std::string name, dims; dict >> name >> dims;) names->push_back(name);
    return torch::tensor(values, torch::kFloat64).reshape({input.size(0), -1});
  }

  // Exports the run (or its EMA), and checks Python's and C++'s torch.jit.load against the C++
  // model and predict. Returns the exported model's logits.
  torch::Tensor check_export(const TrainedRun& run, bool ema, const std::string& label) {
    const TestImage image = make_test_image(runs_.path());
    const fs::path file = export_torchscript(run, ema, runs_.path() / (label + ".pt"));
    const torch::Tensor want = eager_logits(run, ema, image.input);

    std::vector<std::string> names;
    const torch::Tensor py = python_logits(file, image.input, &names);
    EXPECT_EQ(py.sizes(), want.sizes()) << label;
    const double py_diff = max_relative_difference(py, want);
    EXPECT_LE(py_diff, kLogitTolerance) << label;

    torch::jit::Module loaded = torch::jit::load(file.string());
    loaded.eval();
    torch::NoGradGuard no_grad;
    const double cpp_diff = max_relative_difference(loaded.forward({image.input}).toTensor(), want);
    EXPECT_LE(cpp_diff, kLogitTolerance) << label;

    // Inspectable: Python's state_dict has the C++ model's names (parameters and buffers).
    torch::nn::AnyModule model = make_model(run.config, {1});
    std::vector<std::string> expected;
    for (const auto& p : model.ptr()->named_parameters()) expected.push_back(p.key());
    for (const auto& b : model.ptr()->named_buffers()) expected.push_back(b.key());
    std::sort(names.begin(), names.end());
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(names, expected) << label;

    // `trainer predict` on the image file: the softmax of Python's logits for row 0.
    PredictRequest predict;
    predict.checkpoint = run.checkpoint;
    predict.images = {image.file};
    predict.top_k = py.size(1);
    predict.use_ema = ema;
    const ImagePrediction p = predict_images(predict).at(0);
    const torch::Tensor probs = torch::softmax(py[0], 0);
    double prob_diff = 0;
    for (size_t k = 0; k < p.classes.size(); ++k) {
      prob_diff = std::max(prob_diff, std::abs(p.probabilities[k] - probs[p.classes[k]].item<double>()));
    }
    EXPECT_LE(prob_diff, kProbabilityTolerance) << label;
    std::printf("[ export ] %s: Python logits vs C++ model %.3g relative, torch::jit::load %.3g, predict's "
                "probabilities %.3g absolute\n",
                label.c_str(), py_diff, cpp_diff, prob_diff);
    return py;
  }

  testing::TempDir data_, runs_;
  fs::path python_, script_;
};

TEST_F(ExportPython, CompactResNetAndItsEmaMatchTheModelAndPredict) {
  const TrainedRun run = train(data_.path(), runs_.path(), testing::tiny_config("", "").model, 0.9);
  const torch::Tensor model = check_export(run, /*ema=*/false, "compact_resnet");
  const torch::Tensor ema = check_export(run, /*ema=*/true, "compact_resnet_ema");
  EXPECT_GT((model - ema).abs().max().item<double>(), 1e-4) << "the EMA export has the model's weights";
}

TEST_F(ExportPython, TorchvisionResNet18OnASmallInputMatchesTheModelAndPredict) {
  const TrainedRun run = train(data_.path(), runs_.path(), models::model_options("resnet18"), 0.0);
  check_export(run, /*ema=*/false, "resnet18");
  // No EMA in this run: --ema is refused as for state_dict.
  EXPECT_CONTAINS(testing::error_of([&] { export_torchscript(run, true, runs_.path() / "x.pt"); }),
                  "has no EMA weights");
}

TEST_F(ExportPython, EfficientNetAndMobileNetV3MatchTheModelAndPredict) {
  for (const char* type : {"efficientnet_b0", "mobilenet_v3_small"}) {
    check_export(train(data_.path(), runs_.path(), models::model_options(type), 0.0), /*ema=*/false, type);
  }
}

}  // namespace
}  // namespace stoker
