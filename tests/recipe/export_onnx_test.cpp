// `trainer export --format onnx` checked by ONNX Runtime (suites OnnxRuntimePython and, one test
// per family, FamilyOnnxRuntimePython: the libtorch venv's onnxruntime and onnx from
// bench/requirements.txt; skipped, saying why, without them). For every model family Stoker ships,
// a checkpoint with calibrated batch-norm statistics is exported and ONNX Runtime's CPU outputs on
// real images (Fashion-MNIST's test images for the 1-channel models, generated RGB images for the
// 3-channel ones) equal Stoker's eval-mode logits of the same checkpoint: max |difference| <= 1e-4,
// top-1 identical, at batch 7 and batch 1 of one --dynamic-batch file. --include-normalize on
// pixel / 255 equals the pipeline's normalisation; float16 stays within its tolerance; the default
// file has batch 1 and carries its metadata.
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>

#include "data/dataset.h"
#include "data/idx.h"
#include "data/normalize.h"
#include "models/blocks.h"
#include "models/registry.h"
#include "recipe/export.h"
#include "recipe/factory.h"
#include "recipe/tasks.h"
#include "test_config.h"
#include "trainer/checkpoint.h"

namespace stoker {
namespace {
namespace fs = std::filesystem;

constexpr double kFloat32Tolerance = 1e-4;  // max |ONNX Runtime - Stoker| of the logits (the bound)
// float16 weights and activations (10-bit mantissas) through up to 100 layers: max |difference|
// relative to the largest |logit|, at least 1.
constexpr double kFloat16Tolerance = 2e-2;

struct Family {
  std::string type;
  int64_t channels, size;
};
const std::vector<Family>& families() {
  static const std::vector<Family> all = {
      {"compact_resnet", 1, 28}, {"mlp", 1, 28},          {"cifar_resnet20", 3, 32},     {"cifar_resnet56", 3, 32},
      {"resnet18", 3, 64},       {"resnet34", 3, 64},     {"resnet50", 3, 64},           {"resnet101", 3, 64},
      {"vit", 3, 32},            {"convnext", 3, 32},     {"efficientnet_b0", 3, 64},    {"mobilenet_v3_small", 3, 64},
      {"mobilenet_v3_large", 3, 64}};
  return all;
}

const fs::path kFashionMnist = "/usr/share/datasets/fashion-mnist";

// Real images, uint8 [n, H, W, C] as the pipeline hands them over: Fashion-MNIST's first test images,
// or RGB images of smooth waves and a bright disc that vary by image, channel and position.
torch::Tensor images_for(const Family& f, int64_t n) {
  if (f.channels == 1) {
    return data::read_idx(kFashionMnist / "t10k-images-idx3-ubyte.gz").slice(0, 0, n).unsqueeze(-1).contiguous();
  }
  torch::Tensor out = torch::empty({n, f.size, f.size, 3}, torch::kUInt8);
  auto* p = out.data_ptr<uint8_t>();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t y = 0; y < f.size; ++y) {
      for (int64_t x = 0; x < f.size; ++x) {
        const bool disc = std::hypot(x - f.size * (0.3 + 0.07 * i), y - f.size * 0.5) < f.size * 0.2;
        for (int64_t c = 0; c < 3; ++c) {
          const double wave = 127.5 + 127.5 * std::sin(0.21 * (c + 1) * x + 0.13 * (i + 1) * y + 0.9 * i + c);
          *p++ = static_cast<uint8_t>(disc ? 255 - c * 40 : std::lround(wave));
        }
      }
    }
  }
  return out;
}

torch::Tensor normalized(const Config& config, const torch::Tensor& images) {
  const data::Normalizer normalize(images.size(3),
                                   data::NormalizeOptions().set_mean(config.data.mean).set_std(config.data.std));
  return normalize(images).contiguous();
}

// A checkpoint of `f` whose batch norms have random affine parameters and running statistics of the
// images' own (momentum 1 for one pass), so that every layer sees data on the scale training gives.
// The last batch norm of each residual branch scales by U(0, 0.3), as trained ResNets' do (and as
// torchvision's zero_init_residual starts them): with scales near 1 there, the trunk of a deep
// ResNet amplifies float32's rounding until PyTorch's own forward differs from itself by 2e-4
// (ResNet-101, contiguous against channels-last), and no float32 engine could meet the bound.
fs::path make_checkpoint(const Family& f, const fs::path& dir, Config& config) {
  config = testing::tiny_config(dir / "no-data", dir);
  config.model = models::model_options(f.type);
  config.data.num_classes = 10;
  config.data.mean = f.channels == 1 ? std::vector<double>{0.286} : std::vector<double>{0.485, 0.456, 0.406};
  config.data.std = f.channels == 1 ? std::vector<double>{0.353} : std::vector<double>{0.229, 0.224, 0.225};
  torch::manual_seed(17);
  torch::nn::AnyModule model = make_model(config, {f.channels, f.size, f.size});
  {
    torch::NoGradGuard no_grad;
    // Tensors initialised to zero (a ViT's head and class token, biases) made to matter.
    for (auto& p : model.ptr()->parameters()) {
      if (p.abs().max().item<double>() == 0.0) p.normal_(0.0, 0.2);
    }
    for (const auto& m : model.ptr()->modules()) {
      if (auto* bn = m->as<torch::nn::BatchNorm2d>()) {
        bn->weight.uniform_(0.5, 1.5);
        bn->bias.normal_(0.0, 0.2);
        bn->options.momentum(1.0);
      }
    }
    for (const auto& m : model.ptr()->modules()) {
      const char* last = m->as<models::BasicBlockImpl>() ? "bn2" : m->as<models::BottleneckImpl>() ? "bn3" : nullptr;
      if (last != nullptr) m->named_children()[last]->as<torch::nn::BatchNorm2d>()->weight.uniform_(0.0, 0.3);
    }
    model.ptr()->train();
    model.forward(normalized(config, images_for(f, 16)));
    for (const auto& m : model.ptr()->modules()) {
      if (auto* bn = m->as<torch::nn::BatchNorm2d>()) bn->options.momentum(0.1);
    }
  }
  torch::optim::SGD optimizer(model.ptr()->parameters(), torch::optim::SGDOptions(0.1));
  CheckpointContent content;
  content.config_yaml = config_to_yaml(config);
  content.class_names = data::fashion_mnist_class_names();
  const fs::path file = dir / (f.type + ".pt");
  save_checkpoint(file, *model.ptr(), optimizer, content);
  return file;
}

// Stoker's eval-mode logits of the checkpoint on a normalised batch.
torch::Tensor stoker_logits(const Config& config, const fs::path& checkpoint, const torch::Tensor& input) {
  const std::unique_ptr<CheckpointModel> m =
      load_checkpoint_model(config, checkpoint, false, {input.size(1), input.size(2), input.size(3)}, torch::kCPU);
  torch::NoGradGuard no_grad;
  return m->model.forward(input).to(torch::kFloat64);
}

double max_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

class OnnxRuntimePython : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    python_ = testing::venv_python(&why);
    if (python_.empty()) GTEST_SKIP() << why;
    if (testing::shell("'" + python_.string() + "' -c 'import onnxruntime, onnx' >/dev/null 2>&1") != 0) {
      GTEST_SKIP() << "the venv " << python_ << " lacks onnxruntime or onnx; `bash bench/setup.sh` installs them";
    }
    if (!fs::exists(kFashionMnist / "t10k-images-idx3-ubyte.gz")) {
      GTEST_SKIP() << "no Fashion-MNIST at " << kFashionMnist << " (apt-get install dataset-fashion-mnist)";
    }
  }

  struct Run {
    std::vector<torch::Tensor> logits;  // per input; undefined where ONNX Runtime refused it
    std::vector<std::string> errors;
    nlohmann::json model;  // onnx_run.py's model.json
  };
  // ONNX Runtime (CPU) on each of `inputs` in turn.
  Run onnx_runtime(const fs::path& model, const std::vector<torch::Tensor>& inputs) {
    const fs::path out = dir_.path() / ("ort-" + model.stem().string());
    fs::create_directories(out);
    std::string args;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const fs::path in = out / fmt::format("input{}.f32", i);
      const torch::Tensor x = inputs[i].to(torch::kFloat32).contiguous();
      std::ofstream(in, std::ios::binary).write(static_cast<const char*>(x.data_ptr()), static_cast<std::streamsize>(x.nbytes()));
      args += fmt::format(" '{}' {}", in.string(), fmt::join(x.sizes(), ","));
    }
    const fs::path script = fs::path(STOKER_SOURCE_DIR) / "tests/recipe/onnx_run.py", log = out / "log.txt";
    const int status = testing::shell("'" + python_.string() + "' '" + script.string() + "' '" + model.string() + "' '" +
                                      out.string() + "'" + args + " >'" + log.string() + "' 2>&1");
    EXPECT_EQ(status, 0) << testing::read_bytes(log);
    Run run;
    run.model = nlohmann::json::parse(testing::read_bytes(out / "model.json"));
    for (size_t i = 0; i < inputs.size(); ++i) {
      const fs::path error = out / fmt::format("error{}.txt", i);
      run.errors.push_back(fs::exists(error) ? testing::read_bytes(error) : "");
      std::vector<double> values;
      std::ifstream in(out / fmt::format("logits{}.txt", i));
      for (double v = 0; in >> v;) values.push_back(v);
      run.logits.push_back(values.empty() ? torch::Tensor() : torch::tensor(values).reshape({inputs[i].size(0), -1}));
    }
    return run;
  }

  fs::path export_file(const fs::path& checkpoint, const Family& f, const std::string& name,
                       const std::function<void(ExportRequest&)>& options = {}) {
    ExportRequest e;
    e.checkpoint = checkpoint;
    e.output = dir_.path() / name;
    e.input_size = InputSize{f.size, f.size};
    if (options) options(e);
    export_checkpoint(e);
    return e.output;
  }

  testing::TempDir dir_;
  fs::path python_;
};

// One test per family (suite FamilyOnnxRuntimePython), so that each has its own time limit.
class FamilyOnnxRuntimePython : public OnnxRuntimePython, public ::testing::WithParamInterface<Family> {};

TEST_P(FamilyOnnxRuntimePython, EqualsStokersLogitsOnRealImagesAtBatchSevenAndOne) {
  const Family& f = GetParam();
  Config config;
  const fs::path checkpoint = make_checkpoint(f, dir_.path(), config);
  const fs::path file = export_file(checkpoint, f, f.type + ".onnx", [](ExportRequest& e) { e.dynamic_batch = true; });
  const torch::Tensor batch = normalized(config, images_for(f, 7));
  const torch::Tensor one = batch.slice(0, 3, 4);
  const Run run = onnx_runtime(file, {batch, one});
  EXPECT_EQ(run.model["inputs"][0]["shape"], nlohmann::json::array({"batch", f.channels, f.size, f.size}));
  EXPECT_EQ(run.model["providers"][0], "CPUExecutionProvider");
  const torch::Tensor want = stoker_logits(config, checkpoint, batch);
  ASSERT_TRUE(run.logits[0].defined()) << run.errors[0];
  ASSERT_TRUE(run.logits[1].defined()) << run.errors[1];
  ASSERT_EQ(run.logits[0].sizes(), want.sizes());
  const double diff = max_difference(run.logits[0], want), diff_one = max_difference(run.logits[1], want.slice(0, 3, 4));
  EXPECT_LE(diff, kFloat32Tolerance);
  EXPECT_LE(diff_one, kFloat32Tolerance);
  EXPECT_TRUE(torch::equal(run.logits[0].argmax(1), want.argmax(1)));
  std::printf("[ onnx ] %-15s batch 7: max |ORT - Stoker| %.3g (largest |logit| %.3g); batch 1: %.3g\n", f.type.c_str(),
              diff, want.abs().max().item<double>(), diff_one);
}

INSTANTIATE_TEST_SUITE_P(EveryFamily, FamilyOnnxRuntimePython, ::testing::ValuesIn(families()),
                         [](const ::testing::TestParamInfo<Family>& info) { return info.param.type; });

// Every registered model type is in families() or built from the same module types as one there (the
// named ViTs, ConvNeXts and EfficientNets as their configurable or smallest sibling); a family
// registered without joining the ONNX Runtime comparison fails here. (model.type torchscript is
// exported as its own script, not to ONNX.)
TEST(OnnxExportFamilies, EveryRegisteredModelTypeIsComparedWithOnnxRuntime) {
  const std::map<std::string, std::string> same_modules = {
      {"vit_b_16", "vit"},           {"vit_b_32", "vit"},           {"vit_l_16", "vit"},
      {"convnext_tiny", "convnext"}, {"convnext_small", "convnext"}, {"convnext_base", "convnext"},
      {"efficientnet_b1", "efficientnet_b0"}, {"efficientnet_b2", "efficientnet_b0"},
      {"efficientnet_b3", "efficientnet_b0"}, {"torchscript", ""}};
  std::set<std::string> compared;
  for (const Family& f : families()) compared.insert(f.type);
  for (const std::string& type : models::model_registry().names()) {
    const auto sibling = same_modules.find(type);
    if (sibling != same_modules.end() && sibling->second.empty()) continue;
    const std::string& covered = sibling == same_modules.end() ? type : sibling->second;
    EXPECT_TRUE(compared.count(covered) > 0) << "model.type " << type << " is not in families(): add it there";
  }
}

TEST_F(OnnxRuntimePython, IncludeNormalizeOnPixelsOverTwoFiftyFiveEqualsThePipeline) {
  for (const Family& f : {families()[0], families()[4]}) {  // compact_resnet (gray), resnet18 (RGB)
    SCOPED_TRACE(f.type);
    Config config;
    const fs::path checkpoint = make_checkpoint(f, dir_.path(), config);
    const fs::path file = export_file(checkpoint, f, f.type + "-normalize.onnx",
                                      [](ExportRequest& e) { e.include_normalize = true; e.dynamic_batch = true; });
    const torch::Tensor images = images_for(f, 7);
    const Run run = onnx_runtime(file, {images.permute({0, 3, 1, 2}).to(torch::kFloat32) / 255});
    ASSERT_TRUE(run.logits[0].defined()) << run.errors[0];
    const torch::Tensor want = stoker_logits(config, checkpoint, normalized(config, images));
    const double diff = max_difference(run.logits[0], want);
    EXPECT_LE(diff, kFloat32Tolerance);
    EXPECT_TRUE(torch::equal(run.logits[0].argmax(1), want.argmax(1)));
    std::printf("[ onnx ] %-15s --include-normalize on pixel / 255: max |ORT - pipeline + Stoker| %.3g\n",
                f.type.c_str(), diff);
  }
}

TEST_F(OnnxRuntimePython, Float16StaysWithinItsTolerance) {
  for (const Family& f : {families()[0], families()[2], families()[4], families()[6]}) {
    SCOPED_TRACE(f.type);
    Config config;
    const fs::path checkpoint = make_checkpoint(f, dir_.path(), config);
    const fs::path file = export_file(checkpoint, f, f.type + "-fp16.onnx", [](ExportRequest& e) {
      e.dtype = "float16";
      e.dynamic_batch = true;
    });
    const torch::Tensor batch = normalized(config, images_for(f, 7));
    const Run run = onnx_runtime(file, {batch});
    ASSERT_TRUE(run.logits[0].defined()) << run.errors[0];
    EXPECT_EQ(run.model["inputs"][0]["type"], "tensor(float)") << "float32 in, float16 inside";
    EXPECT_EQ(run.model["outputs"][0]["type"], "tensor(float)");
    const torch::Tensor want = stoker_logits(config, checkpoint, batch);
    const double scale = std::max(1.0, want.abs().max().item<double>());
    const double diff = max_difference(run.logits[0], want) / scale;
    EXPECT_LE(diff, kFloat16Tolerance);
    // Top-1 agrees wherever float32's two best logits are further apart than the tolerance.
    const auto [top2, index] = want.topk(2, 1);
    const torch::Tensor clear = (top2.select(1, 0) - top2.select(1, 1)) > 2 * kFloat16Tolerance * scale;
    EXPECT_TRUE(torch::equal(run.logits[0].argmax(1).masked_select(clear), want.argmax(1).masked_select(clear)));
    std::printf("[ onnx ] %-15s float16: max |ORT - Stoker float32| %.3g of the largest |logit| (%.3g)\n",
                f.type.c_str(), diff, scale);
  }
}

TEST_F(OnnxRuntimePython, TheDefaultFileHasBatchOneAndCarriesItsMetadata) {
  const Family& f = families()[0];
  Config config;
  const fs::path checkpoint = make_checkpoint(f, dir_.path(), config);
  const fs::path file = export_file(checkpoint, f, "model.onnx");
  const torch::Tensor batch = normalized(config, images_for(f, 7));
  const Run run = onnx_runtime(file, {batch.slice(0, 0, 1), batch});
  EXPECT_EQ(run.model["inputs"][0]["shape"], nlohmann::json::array({1, 1, 28, 28}));
  EXPECT_EQ(run.model["opset"], 17);
  ASSERT_TRUE(run.logits[0].defined()) << run.errors[0];
  EXPECT_LE(max_difference(run.logits[0], stoker_logits(config, checkpoint, batch.slice(0, 0, 1))), kFloat32Tolerance);
  EXPECT_FALSE(run.logits[1].defined()) << "a batch of 7 for a batch-1 file";
  EXPECT_CONTAINS(run.errors[1], "dimension");

  // The metadata ONNX Runtime reads equals the JSON written beside the file.
  const nlohmann::json& meta = run.model["metadata"];
  const nlohmann::json beside = nlohmann::json::parse(testing::read_bytes(file.string() + ".json"));
  EXPECT_EQ(nlohmann::json::parse(meta["class_names"].get<std::string>()), beside["class_names"]);
  EXPECT_EQ(beside["class_names"][0], "T-shirt/top");
  EXPECT_EQ(nlohmann::json::parse(meta["mean"].get<std::string>()), nlohmann::json::array({0.286}));
  EXPECT_EQ(nlohmann::json::parse(meta["input_size"].get<std::string>()), nlohmann::json::array({28, 28}));
  EXPECT_EQ(meta["model_type"], "compact_resnet");
  EXPECT_EQ(nlohmann::json::parse(meta["input"].get<std::string>())["name"], "input");
  EXPECT_EQ(nlohmann::json::parse(meta["output"].get<std::string>())["name"], "logits");
  EXPECT_EQ(beside["format"], "onnx");
  EXPECT_EQ(beside["channels"], 1);
}

}  // namespace
}  // namespace stoker
