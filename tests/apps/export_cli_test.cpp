// `trainer export` as a user runs it (issue 29 point 6, issue 31): the format from the output's
// extension (never a state dict in a .ts file), ambiguous and mismatched names refused with both
// named, the output folder made first, --input-size instead of the data, the JSON beside every
// export, ONNX's options, and the help that says which format to choose.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/script.h>

#include <fstream>

#include "models/onnx/proto.h"
#include "run_command.h"
#include "test_util.h"

namespace stoker {
namespace {
namespace fs = std::filesystem;
using stoker::testing::TempDir;

testing::CommandResult run_trainer(const std::string& args) {
  return testing::run_command(std::string(testing::trainer_bin()) + " " + args);
}

// One small run, trained once for the suite.
class ExportCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    testing::write_synthetic_idx_dataset(dir_->path(), 64, 32, 12);
    const fs::path recipe = *dir_ / "tiny.yaml";
    std::ofstream(recipe) << "run: {name: cli, dir: \"" << (*dir_ / "runs").string()
                          << "\", device: cpu, threads: 1}\n"
                             "data: {root: \""
                          << dir_->path().string()
                          << "\", batch_size: 32, mean: [0.5], std: [0.3]}\n"
                             "model: {widths: [8, 16], blocks: [1, 1]}\ntrain: {epochs: 1}\n";
    const testing::CommandResult r = run_trainer("--config " + recipe.string());
    train_output_ = r.output;
    if (r.exit_code != 0) return;
    for (const auto& e : fs::directory_iterator(*dir_ / "runs/cli")) run_ = e.path();
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override { ASSERT_FALSE(run_.empty()) << "the training run failed:\n" << train_output_; }

  static testing::CommandResult export_to(const fs::path& output, const std::string& flags = "") {
    return run_trainer("export --checkpoint " + run_.string() + " --output " + output.string() + " " + flags);
  }

  static inline TempDir* dir_ = nullptr;
  static inline fs::path run_;
  static inline std::string train_output_;
};

TEST_F(ExportCli, ATsFileIsTorchScriptInAFolderMadeForItWithoutTheData) {
  const fs::path out = *dir_ / "deploy/v1/model.ts";
  const testing::CommandResult r = export_to(out, "--input-size 12x12 --set data.root=/nowhere");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "wrote " + out.string() + " (TorchScript for input [N, 1, 12, 12] float32");
  torch::jit::Module loaded = torch::jit::load(out.string());  // a state dict would not load here
  loaded.eval();
  torch::NoGradGuard no_grad;
  EXPECT_EQ(loaded.forward({torch::randn({2, 1, 12, 12})}).toTensor().sizes(), (std::vector<int64_t>{2, 10}));
  const nlohmann::json json = nlohmann::json::parse(testing::read_bytes(out.string() + ".json"));
  EXPECT_EQ(json["format"], "torchscript");
  EXPECT_EQ(json["input_size"], nlohmann::json::array({12, 12}));
  EXPECT_EQ(json["channels"], 1);
  EXPECT_EQ(json["mean"], nlohmann::json::array({0.5}));
  EXPECT_EQ(json["std"], nlohmann::json::array({0.3}));
  EXPECT_EQ(json["class_names"].size(), 10u);
  EXPECT_EQ(json["input"]["name"], "input");
}

TEST_F(ExportCli, AnAmbiguousOrMismatchedNameIsRefusedBeforeAnyWork) {
  testing::CommandResult r = export_to(*dir_ / "weights.pt");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_CONTAINS(r.output, "a .pt file may be TorchScript or a state dict; give --format torchscript or --format "
                            "state_dict, or name the file .ts (TorchScript) or .pth (state dict)");
  r = export_to(*dir_ / "model.onnx", "--format state_dict");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_CONTAINS(r.output, "export --format state_dict --output " + (*dir_ / "model.onnx").string() +
                                ": a .onnx file holds onnx, not state_dict");
  r = export_to(*dir_ / "model.ts", "--opset 13 --dtype float16");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_CONTAINS(r.output, "export: --opset, --dtype apply to ONNX exports only, and this one writes torchscript");
  r = export_to(dir_->path());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_CONTAINS(r.output, "is a folder; name the file to write in it");
  r = export_to(*dir_ / "m.onnx", "--input-size 12by12");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_CONTAINS(r.output, "--input-size 12by12: give HxW (e.g. 224x224) or one number for a square");
  for (const char* name : {"weights.pt", "model.onnx", "model.ts", "m.onnx"}) EXPECT_FALSE(fs::exists(*dir_ / name)) << name;

  // A state dict where the name says so (its input size from the recipe's data).
  r = export_to(*dir_ / "weights.pth");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(testing::read_bytes((*dir_ / "weights.pth.json").string()))["input_size"],
            nlohmann::json::array({12, 12}));
}

TEST_F(ExportCli, OnnxWithItsOptions) {
  const fs::path out = *dir_ / "model.onnx";
  const testing::CommandResult r = export_to(out, "--dynamic-batch --include-normalize --dtype float16 --opset 13 --ema");
  EXPECT_EQ(r.exit_code, 1) << "the run has no EMA weights";
  EXPECT_CONTAINS(r.output, "has no EMA weights");
  const testing::CommandResult ok = export_to(out, "--dynamic-batch --include-normalize --dtype float16 --opset 13");
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_CONTAINS(ok.output, "ONNX opset 13, float16 weights, input [batch, 1, 12, 12] float32 in [0, 1] (normalised "
                             "inside), 6 batch norm(s) folded");
  const models::onnx::OnnxModelSummary s = models::onnx::read_onnx_model(testing::read_bytes(out), out.string());
  EXPECT_EQ(s.opset, 13);
  EXPECT_EQ(s.ops.front(), "Sub");
  EXPECT_EQ(s.inputs[0].dims, (std::vector<int64_t>{-1, 1, 12, 12}));
  EXPECT_EQ(s.count("BatchNormalization"), 0);
  EXPECT_EQ(nlohmann::json::parse(s.metadata_value("class_names")).size(), 10u);
  EXPECT_EQ(s.metadata_value("normalize_included"), "true");
}

TEST_F(ExportCli, HelpDescribesTheThreeFormatsAndWhichToChoose) {
  const testing::CommandResult r = run_trainer("export --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* part : {"onnx ", "torchscript ", "state_dict ", "Choose it to deploy outside PyTorch",
                           "Choose it to stay in libtorch", "--include-normalize", "--dynamic-batch", "--opset",
                           "--dtype", "--input-size", "FILE.json"}) {
    EXPECT_CONTAINS(r.output, part);
  }
}

}  // namespace
}  // namespace stoker
