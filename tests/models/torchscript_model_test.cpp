// models/torchscript_model.h: a TorchScript module trained as a native one. The modules here are
// scripted in C++ (torch::jit::Module::define); tests/recipe/torchscript_run_test.cpp trains modules
// scripted in Python (torchvision's, timm's).
#include "models/torchscript_model.h"

#include <gtest/gtest.h>
#include <torch/csrc/jit/api/compilation_unit.h>
#include <torch/torch.h>

#include "models/registry.h"
#include "models/weights/state_dict.h"
#include "models/weights/torch_save.h"
#include "test_util.h"

namespace stoker::models {
namespace {
namespace fs = std::filesystem;
using testing::error_of;
using testing::TempDir;

// A two-layer script: `proj` then a norm with a running mean that it updates only in training (when
// `reads_training`; otherwise it behaves as a traced module: always the same).
torch::jit::Module make_script(bool reads_training, int64_t classes = 4) {
  auto cu = std::make_shared<torch::jit::CompilationUnit>();
  torch::jit::Module norm("__torch__.Norm", cu, true);
  norm.register_attribute("training", c10::BoolType::get(), true);
  norm.register_parameter("weight", torch::ones({classes}), false);
  norm.register_buffer("running_mean", torch::zeros({classes}));
  norm.define(reads_training ? "def forward(self, x):\n"
                               "    if self.training:\n"
                               "        self.running_mean.copy_(0.5 * self.running_mean + 0.5 * x.mean(0).detach())\n"
                               "    return (x - self.running_mean) * self.weight\n"
                             : "def forward(self, x):\n"
                               "    return (x - self.running_mean) * self.weight\n");
  torch::jit::Module net("__torch__.Net", cu, true);
  net.register_attribute("training", c10::BoolType::get(), true);
  torch::manual_seed(0);
  net.register_parameter("proj", torch::randn({classes, 12}), false);
  net.register_module("norm", norm);
  net.define("def forward(self, x):\n    return self.norm.forward(x.flatten(1).matmul(self.proj.t()))\n");
  return net;
}

fs::path save(const torch::jit::Module& m, const fs::path& path) {
  m.save(path.string());
  return path;
}

TEST(TorchScriptModel, ItsParametersAndBuffersAreTheScriptsUnderTheirNames) {
  TempDir tmp;
  TorchScriptModel model(save(make_script(true), tmp / "net.pt").string(), 4);
  std::vector<std::string> names;
  for (const auto& [k, v] : weights::state_of(*model)) names.push_back(k);
  EXPECT_EQ(names, (std::vector<std::string>{"proj", "norm.weight", "norm.running_mean"}));
  // Shared, not copied: an optimizer step on the nn::Module's parameters changes the script's output.
  const torch::Tensor x = torch::randn({2, 3, 2, 2});
  model->eval();
  const torch::Tensor before = model->forward(x);
  {
    torch::NoGradGuard no_grad;
    model->named_parameters()["proj"].mul_(2);
  }
  EXPECT_FALSE(torch::allclose(model->forward(x), before));
  EXPECT_TRUE(torch::allclose(model->script().attr("proj").toTensor(), model->named_parameters()["proj"]));
  // Gradients reach the parameters through the script.
  model->train();
  model->forward(x).sum().backward();
  EXPECT_TRUE(model->named_parameters()["proj"].grad().defined());
  EXPECT_TRUE(model->named_parameters()["norm.weight"].grad().defined());
}

TEST(TorchScriptModel, TrainAndEvalSwitchTheScriptModuleByModule) {
  TempDir tmp;
  TorchScriptModel model(save(make_script(true), tmp / "net.pt").string(), 4);
  EXPECT_FALSE(model->traced());
  const torch::Tensor x = torch::randn({8, 3, 2, 2}) + 3;
  const torch::Tensor mean = model->named_buffers()["norm.running_mean"];
  model->eval();
  EXPECT_FALSE(model->script().attr("training").toBool());
  model->forward(x);
  EXPECT_EQ(mean.abs().sum().item<float>(), 0.0f) << "eval mode updated the running mean";
  model->train();
  model->forward(x);
  EXPECT_GT(mean.abs().sum().item<float>(), 0.0f) << "training mode did not update it";
  // One submodule alone back in eval mode (what model.freeze does to a frozen BatchNorm).
  const torch::Tensor kept = mean.clone();
  for (const auto& m : model->named_modules()) {
    if (m.key() == "norm") m.value()->eval();
  }
  model->forward(x * 2);
  EXPECT_TRUE(torch::equal(mean, kept));
  EXPECT_TRUE(model->script().attr("training").toBool());
}

TEST(TorchScriptModel, BadFilesSignaturesAndClassCountsAreErrorsNamingTheFile) {
  TempDir tmp;
  testing::write_bytes(tmp / "recipe.yaml", "data:\n  root: x\n");
  EXPECT_CONTAINS(error_of([&] { TorchScriptModel((tmp / "recipe.yaml").string(), 4); }),
                  "recipe.yaml is a text file (it starts with \"data:\"), not a TorchScript module; save the network "
                  "in Python: torch.jit.script(model).save(FILE)");
  testing::write_bytes(tmp / "weights.pt", weights::torch_save_bytes({{"w", torch::ones({2})}}));
  EXPECT_CONTAINS(error_of([&] { TorchScriptModel((tmp / "weights.pt").string(), 4); }),
                  "weights.pt is a torch.save file, not a TorchScript module");
  EXPECT_CONTAINS(error_of([&] { TorchScriptModel((tmp / "none.pt").string(), 4); }), "none.pt is missing");
  const std::string half = testing::read_bytes(save(make_script(true), tmp / "full.pt"));
  testing::write_bytes(tmp / "half.pt", half.substr(0, half.size() / 2));
  EXPECT_CONTAINS(error_of([&] { TorchScriptModel((tmp / "half.pt").string(), 4); }), "half.pt is a damaged or truncated");

  torch::jit::Module two("__torch__.Two");
  two.register_attribute("training", c10::BoolType::get(), true);
  two.define("def forward(self, x, y: int):\n    return x * y\n");
  EXPECT_CONTAINS(error_of([&] { TorchScriptModel(save(two, tmp / "two.pt").string(), 4); }),
                  "its forward is forward(x: Tensor, y: int) -> Tensor, but Stoker calls it with one image batch");

  TorchScriptModel model(save(make_script(true, 4), tmp / "net.pt").string(), 10);
  EXPECT_CONTAINS(error_of([&] { model->forward(torch::randn({2, 3, 2, 2})); }),
                  "its forward gives outputs of shape [2, 4] for a batch of 2, but the data has 10 classes");
}

TEST(TorchScriptModel, AModuleThatNeverReadsTrainingIsFlaggedAsTraced) {
  TempDir tmp;
  TorchScriptModel model(save(make_script(false), tmp / "traced.pt").string(), 4);
  EXPECT_TRUE(model->traced());
}

TEST(TorchScriptModel, TheRegistryBuildsItFromModelPath) {
  TempDir tmp;
  save(make_script(true), tmp / "net.pt");
  TypedOptions options = model_options("torchscript");
  EXPECT_CONTAINS(error_of([&] { create_model(options, {3, 4}); }), "model.type: torchscript needs path");
  options.as<TorchScriptOptions>().path = (tmp / "net.pt").string();
  torch::nn::AnyModule model = create_model(options, {3, 4});
  EXPECT_EQ(model.forward(torch::randn({5, 3, 2, 2})).sizes(), (std::vector<int64_t>{5, 4}));
}

}  // namespace
}  // namespace stoker::models
