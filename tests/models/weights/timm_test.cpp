// model.pretrained from timm's checkpoints (models/weights/timm_names.h, models/timm.h, recipe/pretrained.h):
// every family with a timm twin reads a checkpoint timm wrote, in a Hub folder with config.json, as
// model.safetensors and as pytorch_model.bin, and gives timm's own eval-mode logits (every logit within 1e-4
// of the largest, float32, several input sizes where the family allows); what does not compute as timm's
// twin is refused naming the difference; the names of the full-size architectures too large to make here
// (ResNet-101, ConvNeXt-S/B, ViT-B/16, B/32, L/16) equal timm's, key for key and shape for shape.
//
// The checkpoints come from tests/models/weights/timm_checkpoints.py, run by the venv's Python once (about
// 40 s on an idle machine; 600 MB in timm_checkpoints/ beside the test binary, made again when the script
// changes); without timm those tests skip, saying so. The naming and cache tests at the end need no Python.
#include <cstdlib>
#include <functional>
#include <fstream>
#include <map>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "models/registry.h"
#include "models/timm.h"
#include "models/weights/hub.h"
#include "models/weights/safetensors.h"
#include "models/weights/state_dict.h"
#include "models/weights/timm_names.h"
#include "recipe/config.h"
#include "recipe/hub_export.h"
#include "recipe/pretrained.h"
#include "test_util.h"

namespace stoker {
namespace {
namespace fs = std::filesystem;
using testing::error_of;

// A case of timm_checkpoints.py (its CASES: the folder name) and the model that takes it.
struct Case {
  const char* folder;
  const char* model;  // the `model:` mapping, without pretrained
};
// Must match CASES in timm_checkpoints.py.
const Case kCases[] = {
    {"resnet18", "{type: resnet18}"},
    {"resnet34", "{type: resnet34}"},
    {"resnet50", "{type: resnet50}"},
    {"convnext_tiny", "{type: convnext_tiny}"},
    {"convnext_small_net", "{type: convnext, widths: [8, 16, 24, 32], depths: [1, 1, 2, 1]}"},
    {"vit_small_net", "{type: vit, patch_size: 8, num_layers: 2, num_heads: 2, hidden_dim: 32, mlp_dim: 128, "
                      "image_size: 32}"},
    {"efficientnet_b0", "{type: efficientnet_b0}"},
    {"efficientnet_b1", "{type: efficientnet_b1}"},
    {"efficientnet_b2", "{type: efficientnet_b2}"},
    {"efficientnet_b3", "{type: efficientnet_b3}"},
    {"mobilenetv3_small_100", "{type: mobilenet_v3_small, bn_eps: 1.0e-5}"},
    {"mobilenetv3_large_100", "{type: mobilenet_v3_large, bn_eps: 1.0e-5}"},
};

// The recipe that reads `pretrained` into the model `model` (a `model:` mapping), for `classes` classes.
Config config_of(const std::string& model, const std::string& pretrained, int64_t classes = 10) {
  std::string yaml = model;
  yaml.insert(yaml.size() - 1, ", pretrained: '" + pretrained + "'");
  return parse_config("model: " + yaml + "\ndata: {num_classes: " + std::to_string(classes) + "}\n", "timm.yaml");
}

// The model `config` describes, loaded from its model.pretrained; `line` gets the log line.
torch::nn::AnyModule load(const Config& config, std::string* line = nullptr, int64_t size = 64) {
  torch::manual_seed(0);
  torch::nn::AnyModule model = models::create_model(config.model, {3, config.data.num_classes, size, size});
  const std::string said = load_pretrained(*model.ptr(), config);
  if (line != nullptr) *line = said;
  model.ptr()->eval();
  return model;
}

// The largest |difference| between the model's logits and timm's for every input of `golden`, relative to
// the largest |logit| of timm's for that input; the worst over the inputs.
double worst_relative_difference(torch::nn::AnyModule& model, const fs::path& golden, int* inputs) {
  std::map<std::string, at::Tensor> g;
  for (auto& [key, tensor] : models::weights::read_safetensors(golden)) g[key] = tensor;
  double worst = 0;
  torch::NoGradGuard no_grad;
  for (*inputs = 0; g.count("input_" + std::to_string(*inputs)); ++*inputs) {
    const std::string i = std::to_string(*inputs);
    const at::Tensor want = g.at("logits_" + i), got = model.forward(g.at("input_" + i));
    EXPECT_EQ(got.sizes(), want.sizes()) << golden;
    if (got.sizes() != want.sizes()) return 1e9;
    worst = std::max(worst, (got - want).abs().max().item<double>() / want.abs().max().item<double>());
  }
  return worst;
}

// The checkpoints, made once for every process of the suite (ctest runs each test in its own): beside the
// test binary in timm_checkpoints/, under a lock, and again only when timm_checkpoints.py changes.
class TimmCheckpointsPython : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    python_ = testing::venv_python(&skip_);
    if (python_.empty()) return;
    if (testing::shell("'" + python_.string() + "' -c 'import timm, safetensors' >/dev/null 2>&1") != 0) {
      skip_ = "timm is not installed in " + python_.string() + "; bash bench/setup.sh installs it";
      return;
    }
    const fs::path script = fs::path(STOKER_SOURCE_DIR) / "tests" / "models" / "weights" / "timm_checkpoints.py";
    dir_ = fs::read_symlink("/proc/self/exe").parent_path() / "timm_checkpoints";
    fs::create_directories(dir_);
    const std::string made = "made-" + std::to_string(std::hash<std::string>{}(testing::read_bytes(script)));
    const fs::path log = dir_ / "generator.log";
    const std::string command = "flock '" + (dir_ / ".lock").string() + "' sh -c \"test -f '" + (dir_ / made).string() +
                                "' || (rm -rf '" + (dir_ / "ck").string() + "' && '" + python_.string() + "' '" +
                                script.string() + "' '" + (dir_ / "ck").string() + "' >'" + log.string() +
                                "' 2>&1 && touch '" + (dir_ / made).string() + "')\"";
    if (testing::shell(command) != 0) failed_ = command + "\n" + testing::read_bytes(log);
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_EQ(failed_, "") << "timm_checkpoints.py failed";
  }
  static fs::path folder(const std::string& name) { return dir_ / "ck" / name; }

  static inline fs::path python_, dir_;
  static inline std::string skip_, failed_;
};

TEST_F(TimmCheckpointsPython, EveryFamilyGivesTimmsLogitsFromSafetensorsAndTorchSave) {
  for (const Case& c : kCases) {
    const fs::path folder = TimmCheckpointsPython::folder(c.folder);
    // The folder (model.safetensors where it has both), and pytorch_model.bin beside a model.safetensors.
    for (const fs::path& path : {folder, folder / "pytorch_model.bin"}) {
      if (path != folder && !fs::exists(folder / "model.safetensors")) continue;
      if (!fs::exists(path)) continue;
      SCOPED_TRACE(path.string());
      std::string line;
      torch::nn::AnyModule model = load(config_of(c.model, path.string()), &line);
      EXPECT_CONTAINS(line, "timm's ");
      int inputs = 0;
      const double worst = worst_relative_difference(model, folder / "golden.safetensors", &inputs);
      EXPECT_GE(inputs, 1);
      EXPECT_LE(worst, 1e-4) << c.folder << ": " << line;
    }
  }
}

TEST_F(TimmCheckpointsPython, ANewHeadForOtherClassesIsReinitialisedAndTheRestLoaded) {
  std::string line;
  torch::nn::AnyModule model = load(config_of("{type: efficientnet_b0}", folder("efficientnet_b0").string(), 4), &line);
  EXPECT_CONTAINS(line, "head classifier.1 re-initialised for 4 classes");
  EXPECT_CONTAINS(line, "timm's names");
  EXPECT_CONTAINS(line, "trained with mean [0.485, 0.456, 0.406]");
  EXPECT_EQ(model.forward(torch::zeros({1, 3, 32, 32})).sizes(), (std::vector<int64_t>{1, 4}));
}

TEST_F(TimmCheckpointsPython, HubCacheEntryIsReadOfflineAsHuggingfaceHubLaysItOut) {
  // models--ORG--NAME/{refs/main, snapshots/<commit>/ -> ../../blobs/<hash>}, as snapshot_download leaves it.
  testing::TempDir cache;
  const fs::path repo = cache / "models--timm--resnet18.test";
  fs::create_directories(repo / "refs");
  fs::create_directories(repo / "blobs");
  fs::create_directories(repo / "snapshots" / "0123abc");
  testing::write_bytes(repo / "refs" / "main", "0123abc");
  for (const char* name : {"config.json", "model.safetensors"}) {
    fs::copy_file(folder("resnet18") / name, repo / "blobs" / (std::string("blob-") + name));
    fs::create_symlink(fs::path("../../blobs") / (std::string("blob-") + name), repo / "snapshots" / "0123abc" / name);
  }
  ::setenv("HF_HUB_CACHE", cache.path().c_str(), 1);
  std::string line;
  torch::nn::AnyModule model = load(config_of("{type: resnet18}", "hf:timm/resnet18.test"), &line);
  const std::string missing = error_of([] { models::weights::locate_pretrained("hf:timm/resnet18.other"); });
  ::unsetenv("HF_HUB_CACHE");
  EXPECT_CONTAINS(line, "model.pretrained: hf:timm/resnet18.test (" + (repo / "snapshots" / "0123abc").string());
  int inputs = 0;
  EXPECT_LE(worst_relative_difference(model, folder("resnet18") / "golden.safetensors", &inputs), 1e-4);
  EXPECT_CONTAINS(missing, "snapshot_download('timm/resnet18.other')");
  EXPECT_CONTAINS(missing, "never downloads");
}

TEST_F(TimmCheckpointsPython, WhatComputesOtherwiseIsRefusedNamingTheDifference) {
  const auto refusal = [](const std::string& model, const fs::path& path) {
    return error_of([&] { load(config_of(model, path.string())); });
  };
  // config.json's architecture: ResNet-D, a TensorFlow port.
  EXPECT_CONTAINS(refusal("{type: resnet18}", folder("resnet18d")), "timm's resnet18d (ResNet-D");
  EXPECT_CONTAINS(refusal("{type: efficientnet_b0}", folder("tf_efficientnet_b0")), "pads 'same'");
  // Without config.json, the names: the first tensor that does not fit.
  testing::TempDir bare;
  fs::copy_file(folder("resnet18d") / "model.safetensors", bare / "resnet18d.safetensors");
  const std::string names = refusal("{type: resnet18}", bare / "resnet18d.safetensors");
  EXPECT_CONTAINS(names, "missing from the file: conv1.weight");
  EXPECT_CONTAINS(names, "conv1.0.weight");
  // MobileNetV3's batch-norm eps, and how to match it.
  EXPECT_CONTAINS(refusal("{type: mobilenet_v3_large}", folder("mobilenetv3_large_100")),
                  "normalises with batch-norm eps 1e-05, model.type mobilenet_v3_large with 0.001");
  // model_args that change what is computed: the head's norm before pooling, another number of heads.
  EXPECT_CONTAINS(refusal(kCases[4].model, folder("convnext_hnf_net")), "head_norm_first");
  EXPECT_CONTAINS(refusal("{type: vit, patch_size: 8, num_layers: 2, num_heads: 4, hidden_dim: 32, mlp_dim: 128, "
                          "image_size: 32}",
                          folder("vit_small_net")),
                  "the model's attention has 4 heads");
  // A type without a timm twin.
  EXPECT_CONTAINS(refusal("{type: cifar_resnet20}", folder("resnet18")), "has no timm twin");
}

// `trainer export --format safetensors` of a run from timm's weights, with the checkpoint's head (10 classes) or
// a new one (4): timm builds config.json's architecture, loads the file strictly and gives the model's logits.
TEST_F(TimmCheckpointsPython, SafetensorsExportLoadsStrictlyBackIntoTimm) {
  const fs::path script = fs::path(STOKER_SOURCE_DIR) / "tests" / "models" / "weights" / "timm_load_export.py";
  // (A new ViT head starts at zero, as torchvision's: the ViT keeps its head.)
  for (const auto& [index, classes] : {std::pair{10, 10}, std::pair{11, 4}, std::pair{4, 4}, std::pair{5, 10}}) {
    const Case& c = kCases[index];
    SCOPED_TRACE(std::string(c.folder) + " for " + std::to_string(classes) + " classes");
    const Config config = config_of(c.model, folder(c.folder).string(), classes);
    torch::nn::AnyModule model = load(config);
    testing::TempDir out;
    std::vector<std::string> names;
    for (int64_t i = 0; i < classes; ++i) names.push_back("class " + std::to_string(i));
    const HubExport written = write_safetensors_export(*model.ptr(), config, names, std::pair{64, 64},
                                                       out / "model.safetensors");
    EXPECT_CONTAINS(written.summary, "timm's names");
    ASSERT_EQ(written.config, out / "config.json");
    const models::weights::HubConfig hub = models::weights::read_hub_config(written.config);
    EXPECT_EQ(hub.num_classes, classes);
    EXPECT_EQ(hub.label_names, names);
    const at::Tensor x = torch::randn({2, 3, 64, 64});
    at::Tensor logits;
    {
      torch::NoGradGuard no_grad;
      logits = model.forward(x);
    }
    testing::write_bytes(out / "expected.safetensors", models::weights::safetensors_bytes({{"input", x}, {"logits", logits}}));
    const std::string command = "'" + python_.string() + "' '" + script.string() + "' '" + out.path().string() + "' '" +
                                (out / "expected.safetensors").string() + "' >'" + (out / "log").string() + "' 2>&1";
    EXPECT_EQ(testing::shell(command), 0) << testing::read_bytes(out / "log");
  }
}

// The full-size architectures (timm's keys from the meta device): every key of timm's is the model's, in
// the same shape, and nothing else.
TEST_F(TimmCheckpointsPython, FullSizeArchitecturesNameEveryTensorAsTimm) {
  std::ifstream in(folder("keys.json"));
  const nlohmann::json lists = nlohmann::json::parse(in);
  const std::map<std::string, std::string> types = {
      {"resnet101", "resnet101"},         {"convnext_small", "convnext_small"}, {"convnext_base", "convnext_base"},
      {"vit_base_patch16_224", "vit_b_16"}, {"vit_base_patch32_224", "vit_b_32"}, {"vit_large_patch16_224", "vit_l_16"}};
  for (const auto& [arch, type] : types) {
    SCOPED_TRACE(arch);
    torch::nn::AnyModule model = models::create_model(models::model_options(type), {3, 1000, 224, 224});
    std::map<std::string, std::vector<int64_t>> ours;
    for (const auto& [key, t] : models::weights::to_timm_names(*models::timm_dialect(type),
                                                                models::weights::state_of(*model.ptr()))) {
      ours[key] = t.sizes().vec();
    }
    ASSERT_TRUE(lists.contains(arch));
    size_t count = 0;
    for (const auto& entry : lists[arch]) {
      const std::string key = entry[0].get<std::string>();
      ++count;
      ASSERT_TRUE(ours.count(key)) << "timm's " << key << " is none of " << type << "'s";
      EXPECT_EQ(ours[key], entry[1].get<std::vector<int64_t>>()) << key;
    }
    EXPECT_EQ(ours.size(), count) << type << " has tensors timm's " << arch << " has not";
  }
}

// Without Python: the names go both ways, reshaped where timm's shapes differ.
TEST(TimmNames, EveryFamilyRoundTripsAndIsRecognisedByItsKeys) {
  for (const char* type : {"resnet18", "convnext_tiny", "vit_b_32", "efficientnet_b0", "mobilenet_v3_small",
                           "mobilenet_v3_large"}) {
    SCOPED_TRACE(type);
    torch::nn::AnyModule model = models::create_model(models::model_options(type), {3, 10, 224, 224});
    const models::weights::NamedTensors state = models::weights::state_of(*model.ptr());
    const models::weights::TimmDialect dialect = *models::timm_dialect(type);
    models::weights::NamedTensors timm = models::weights::to_timm_names(dialect, state);
    std::vector<std::string> keys;
    for (const auto& t : state) keys.push_back(t.first);
    EXPECT_EQ(models::weights::names_are_timms(dialect, keys, timm), std::string(type) != "resnet18");
    EXPECT_FALSE(models::weights::names_are_timms(dialect, keys, state));
    models::weights::from_timm_names(dialect, keys, timm);
    ASSERT_EQ(timm.size(), state.size());
    for (size_t i = 0; i < state.size(); ++i) {
      EXPECT_EQ(timm[i].first, state[i].first);
      EXPECT_EQ(timm[i].second.sizes(), state[i].second.sizes()) << state[i].first;
    }
  }
  std::map<std::string, std::vector<int64_t>> small;
  torch::nn::AnyModule mobile = models::create_model(models::model_options("mobilenet_v3_small"), {3, 10, 0, 0});
  for (const auto& [key, t] : models::weights::to_timm_names(*models::timm_dialect("mobilenet_v3_small"),
                                                              models::weights::state_of(*mobile.ptr()))) {
    small[key] = t.sizes().vec();
  }
  EXPECT_EQ(small.at("blocks.0.0.conv_dw.weight"), (std::vector<int64_t>{16, 1, 3, 3}));
  EXPECT_EQ(small.at("blocks.0.0.se.conv_reduce.weight"), (std::vector<int64_t>{8, 16, 1, 1}));
  EXPECT_EQ(small.at("blocks.1.0.conv_pwl.weight"), (std::vector<int64_t>{24, 72, 1, 1}));
  EXPECT_EQ(small.at("blocks.5.0.conv.weight"), (std::vector<int64_t>{576, 96, 1, 1}));
  EXPECT_EQ(small.at("conv_head.weight"), (std::vector<int64_t>{1024, 576, 1, 1}));
  EXPECT_EQ(small.count("classifier.weight"), 1u);
  EXPECT_FALSE(models::timm_dialect("cifar_resnet20").has_value());
}

// Without Python: the cache's layout, the environment's order, revisions, and what a missing entry says.
TEST(HubCache, EntriesAreFoundAsHuggingfaceHubLaysThemOut) {
  namespace w = models::weights;
  testing::TempDir home;
  const fs::path hub = home / "hf" / "hub";
  const fs::path repo = hub / "models--acme--tiny-net";
  fs::create_directories(repo / "refs");
  for (const char* commit : {"c0ffee", "beef01"}) {
    fs::create_directories(repo / "snapshots" / commit);
    testing::write_bytes(repo / "snapshots" / commit / "model.safetensors", w::safetensors_bytes({{"w", torch::ones({2})}}));
    testing::write_bytes(repo / "snapshots" / commit / "config.json",
                         R"({"architecture": "resnet18", "num_classes": 3, "label_names": ["a", "b", "c"],
                             "model_args": {"num_classes": 3}, "pretrained_cfg": {"mean": [0.5, 0.5, 0.5],
                             "std": [0.25, 0.25, 0.25], "input_size": [3, 160, 128], "crop_pct": 0.875,
                             "interpolation": "bilinear", "tag": "x_in1k"}})");
  }
  testing::write_bytes(repo / "refs" / "main", "c0ffee\n");
  testing::write_bytes(repo / "refs" / "v2", "beef01");
  ::unsetenv("HF_HUB_CACHE");
  ::setenv("HF_HOME", (home / "hf").c_str(), 1);
  EXPECT_EQ(w::hub_cache_dir(), hub);
  const w::PretrainedSource main = w::locate_pretrained("hf:acme/tiny-net");
  const w::PretrainedSource v2 = w::locate_pretrained("hf:acme/tiny-net@v2");
  const w::PretrainedSource commit = w::locate_pretrained("hf:acme/tiny-net@beef01");
  const std::string missing = error_of([] { w::locate_pretrained("hf:acme/other"); });
  const std::string no_snapshot = error_of([] { w::locate_pretrained("hf:acme/tiny-net@v3"); });
  const std::string malformed = error_of([] { w::locate_pretrained("hf:tiny-net"); });
  ::unsetenv("HF_HOME");
  EXPECT_EQ(main.weights, repo / "snapshots" / "c0ffee" / "model.safetensors");
  EXPECT_EQ(main.config, repo / "snapshots" / "c0ffee" / "config.json");
  EXPECT_EQ(v2.weights, repo / "snapshots" / "beef01" / "model.safetensors");
  EXPECT_EQ(commit.weights, v2.weights);
  EXPECT_CONTAINS(missing, "acme/other is not in the Hugging Face cache");
  EXPECT_CONTAINS(missing, "python -c \"from huggingface_hub import snapshot_download; snapshot_download('acme/other')\"");
  EXPECT_CONTAINS(no_snapshot, "no snapshot of v3");
  EXPECT_CONTAINS(malformed, "hf:ORG/NAME");
  // A folder, and a Hub-named file in it, take config.json from beside them; another file does not.
  EXPECT_EQ(w::locate_pretrained((repo / "snapshots" / "c0ffee").string()).config, main.config);
  EXPECT_EQ(w::locate_pretrained(main.weights.string()).config, main.config);
  testing::write_bytes(home / "w.safetensors", "");
  EXPECT_TRUE(w::locate_pretrained((home / "w.safetensors").string()).config.empty());
  const std::string empty = error_of([&] { w::locate_pretrained(home.path().string()); });
  EXPECT_CONTAINS(empty, "holds neither model.safetensors nor pytorch_model.bin");
  const w::HubConfig config = w::read_hub_config(main.config);
  EXPECT_EQ(config.architecture, "resnet18");
  EXPECT_EQ(config.num_classes, 3);
  EXPECT_EQ(config.label_names, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(config.input_size, (std::vector<int64_t>{3, 160, 128}));
  EXPECT_EQ(config.std, (std::vector<double>{0.25, 0.25, 0.25}));
  EXPECT_DOUBLE_EQ(config.crop_pct, 0.875);
  EXPECT_EQ(config.interpolation, "bilinear");
  EXPECT_EQ(config.model_args, (std::vector<std::pair<std::string, std::string>>{{"num_classes", "3"}}));
  // Written back, it reads the same.
  testing::write_bytes(home / "again.json", w::hub_config_text(config, 512));
  const w::HubConfig again = w::read_hub_config(home / "again.json");
  EXPECT_EQ(again.label_names, config.label_names);
  EXPECT_EQ(again.mean, config.mean);
  EXPECT_EQ(again.model_args, config.model_args);
  // pretrained_cfg's mean and std become the recipe's where it leaves them unset and the channels agree.
  Config recipe = config_of("{type: resnet18}", main.config.parent_path().string());
  apply_pretrained_cfg(recipe, 1);
  EXPECT_EQ(recipe.data.mean, (std::vector<double>{0.0}));
  apply_pretrained_cfg(recipe, 3);
  EXPECT_EQ(recipe.data.mean, (std::vector<double>{0.5, 0.5, 0.5}));
  EXPECT_EQ(recipe.data.std, (std::vector<double>{0.25, 0.25, 0.25}));
  Config set = parse_config("model: {type: resnet18, pretrained: '" + main.config.parent_path().string() +
                                "'}\ndata: {mean: [0.4, 0.4, 0.4], std: [0.2, 0.2, 0.2]}\n",
                            "set.yaml");
  apply_pretrained_cfg(set, 3);
  EXPECT_EQ(set.data.mean, (std::vector<double>{0.4, 0.4, 0.4}));
  testing::write_bytes(home / "bad.json", R"({"architecture": 5})");
  EXPECT_CONTAINS(error_of([&] { w::read_hub_config(home / "bad.json"); }), "\"architecture\" is 5");
}

}  // namespace
}  // namespace stoker
