// model.type: torchscript end to end: networks scripted in Python by the test itself (torchvision's
// resnet18, timm's resnet10t, convnext_atto and a ViT at 32x32) train two epochs from
// `trainer --config` with a falling loss, with an EMA, and resume exactly; a traced one is warned
// about and one whose forward takes two tensors refused; export writes the script with the weights.
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <fstream>

#include "run_command.h"
#include "test_util.h"
#include "trainer/checkpoint.h"

namespace stoker {
namespace {
namespace fs = std::filesystem;
using testing::TempDir;

std::string recipe(const fs::path& network, const fs::path& runs, int64_t epochs, const std::string& name) {
  return fmt::format(R"(run: {{name: {}, dir: {}, device: cpu, threads: 2, seed: 3}}
model: {{type: torchscript, path: {}}}
data:
  type: synthetic
  synthetic: {{train_samples: 96, test_samples: 32, height: 32, width: 32, channels: 3}}
  num_classes: 4
  batch_size: 16
  workers: 0
  mean: [0.5, 0.5, 0.5]
  std: [0.25, 0.25, 0.25]
  train_transforms: []
  eval_transforms: []
optimizer: {{type: adamw, lr: 0.002, weight_decay: 0.01}}
schedule: {{type: constant}}
train: {{epochs: {}, ema_decay: 0.9, log_every_steps: 2}}
logging: {{flops: false, telemetry: false}}
)",
                     name, runs.string(), network.string(), epochs);
}

fs::path write(const fs::path& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

// The run directory a finished `trainer --config` printed (the only one under runs/name).
fs::path run_dir(const fs::path& runs, const std::string& name) {
  for (const auto& entry : fs::directory_iterator(runs / name)) return entry.path();
  return {};
}

std::vector<double> epoch_train_losses(const fs::path& dir) {
  std::ifstream in(dir / "metrics.jsonl");
  std::vector<double> out;
  for (std::string line; std::getline(in, line);) {
    const auto at = line.find("\"train_loss\":");
    if (line.find("\"kind\":\"epoch\"") != std::string::npos && at != std::string::npos) {
      out.push_back(std::stod(line.substr(at + 13)));
    }
  }
  return out;
}

class TorchScriptRunPython : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string why;
    python_ = testing::venv_python(&why);
    if (python_.empty()) {
      skip_ = why;
      return;
    }
    if (testing::shell("'" + python_.string() + "' -c 'import timm, torchvision' >/dev/null 2>&1") != 0) {
      skip_ = "timm or torchvision is not installed in " + python_.string() + "; install them with `bash bench/setup.sh`";
      return;
    }
    networks_ = new TempDir;
    const std::string script = std::string(STOKER_SOURCE_DIR) + "/tests/models/finetune_python.py";
    const int status = testing::shell("'" + python_.string() + "' '" + script + "' script-all 32 4 '" +
                                      networks_->path().string() + "'");
    if (status != 0) failure_ = "tests/models/finetune_python.py script-all failed (exit status " + std::to_string(status) + "): its output above says why";
  }
  static void TearDownTestSuite() {
    delete networks_;
    networks_ = nullptr;
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    // With Python and its packages there, a script that fails is the test's failure, not a skip.
    if (!failure_.empty()) GTEST_FAIL() << failure_;
  }
  // Two epochs in one run, and one epoch then a resume for the second: equal weights, falling loss.
  void trains_and_resumes(const std::string& network) {
    const fs::path file = networks_->path() / (network + ".pt");
    const std::string trainer = STOKER_TRAINER_BIN;
    const auto straight = testing::run_command(trainer + " --config '" +
                                               write(runs_ / "a.yaml", recipe(file, runs_.path(), 2, "a")).string() + "'");
    ASSERT_EQ(straight.exit_code, 0) << straight.output;
    EXPECT_EQ(straight.output.find("looks traced"), std::string::npos) << straight.output;
    const fs::path a = run_dir(runs_.path(), "a");
    const std::vector<double> losses = epoch_train_losses(a);
    ASSERT_EQ(losses.size(), 2u);
    EXPECT_LT(losses[1], losses[0]) << network << ": the loss did not fall";
    const auto first = testing::run_command(trainer + " --config '" +
                                            write(runs_ / "b.yaml", recipe(file, runs_.path(), 1, "b")).string() + "'");
    ASSERT_EQ(first.exit_code, 0) << first.output;
    const fs::path b = run_dir(runs_.path(), "b");
    const auto resumed = testing::run_command(trainer + " --resume '" + b.string() +
                                              "' --set train.epochs=2 --allow-config-change");
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    const auto want = read_checkpoint_weights(a / "checkpoints/last.pt");
    const auto got = read_checkpoint_weights(b / "checkpoints/last.pt");
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].first, want[i].first);
      EXPECT_TRUE(torch::allclose(got[i].second, want[i].second, 1e-5, 1e-6)) << network << " " << want[i].first;
    }
    // Export: the script itself with the checkpoint's EMA weights, loadable by torch::jit::load.
    const fs::path exported = runs_ / (network + "_export.pt");
    const auto out = testing::run_command(trainer + " export --checkpoint '" + a.string() + "' --ema --format "
                                          "torchscript --output '" + exported.string() + "'");
    ASSERT_EQ(out.exit_code, 0) << out.output;
    torch::jit::Module loaded = torch::jit::load(exported.string());
    const auto ema = read_checkpoint_weights(a / "checkpoints/last.pt", /*ema=*/true);
    for (const auto& p : loaded.named_parameters()) {
      for (const auto& [k, v] : ema) {
        if (k == p.name) EXPECT_TRUE(torch::equal(p.value, v)) << k;
      }
    }
    EXPECT_EQ(loaded.forward({torch::randn({2, 3, 32, 32})}).toTensor().sizes(), (std::vector<int64_t>{2, 4}));
  }
  static inline fs::path python_;
  static inline std::string skip_;
  static inline std::string failure_;
  static inline TempDir* networks_ = nullptr;
  TempDir runs_;
};

TEST_F(TorchScriptRunPython, TorchvisionResNet18) { trains_and_resumes("tv_resnet18"); }
TEST_F(TorchScriptRunPython, TimmResNet) { trains_and_resumes("timm_resnet"); }
TEST_F(TorchScriptRunPython, TimmConvNeXtAtto) { trains_and_resumes("convnext_atto"); }
TEST_F(TorchScriptRunPython, TimmViT) { trains_and_resumes("vit"); }

TEST_F(TorchScriptRunPython, ATracedNetworkIsWarnedAboutAndTwoInputsRefused) {
  const std::string trainer = STOKER_TRAINER_BIN;
  const fs::path traced = networks_->path() / "traced_resnet.pt";
  const auto warned = testing::run_command(trainer + " --config '" +
                                           write(runs_ / "t.yaml", recipe(traced, runs_.path(), 1, "t")).string() + "'");
  EXPECT_NE(warned.output.find("looks traced (torch.jit.trace), not scripted"), std::string::npos) << warned.output;
  const fs::path two = networks_->path() / "two_inputs.pt";
  const auto refused = testing::run_command(trainer + " --config '" +
                                            write(runs_ / "u.yaml", recipe(two, runs_.path(), 1, "u")).string() + "'");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.output.find("its forward is forward(x: Tensor, y: Tensor) -> Tensor"), std::string::npos)
      << refused.output;
}

}  // namespace
}  // namespace stoker
