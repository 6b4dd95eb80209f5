// Issue 29, tried as a new user would with a folder of their own images (a 3-class `shapes/`):
// each silent failure it found now gets the right behaviour or a clear error, through the trainer
// program itself.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "run_command.h"
#include "test_util.h"

namespace stoker {
namespace {
namespace fs = std::filesystem;
using stoker::testing::TempDir;
using Result = stoker::testing::CommandResult;

Result trainer(const std::string& args) {
  return stoker::testing::run_command(std::string(stoker::testing::trainer_bin()) + " " + args);
}

void write_text(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

// shapes/{train,val}/{circle,square,triangle}/*.png: each class its own grey level and noise.
void write_shapes(const fs::path& root, int train, int val) {
  const std::vector<std::string> classes = {"circle", "square", "triangle"};
  for (size_t c = 0; c < classes.size(); ++c) {
    for (const auto& [split, count] : {std::pair<const char*, int>{"train", train}, {"val", val}}) {
      const fs::path dir = root / split / classes[c];
      fs::create_directories(dir);
      for (int i = 0; i < count; ++i) {
        std::vector<uint8_t> pixels(16 * 16 * 3);
        for (size_t p = 0; p < pixels.size(); ++p) pixels[p] = static_cast<uint8_t>(60 * c + (p * 7 + i * 13) % 40);
        stoker::testing::write_png(dir / fmt::format("{}.png", i), 16, 16, 3, pixels);
      }
    }
  }
}

// A recipe for shapes/: what the README's own-images section has a user write.
std::string shapes_recipe(const fs::path& root, const fs::path& runs, const std::string& extra = "") {
  return fmt::format(R"(run: {{name: shapes, dir: "{}", device: cpu, threads: 1}}
data:
  type: image_folder
  root: "{}"
  batch_size: 6
  eval_batch_size: 6
  train_transforms: [{{type: random_resized_crop, size: 16}}, {{type: horizontal_flip}}]
  eval_transforms: [{{type: resize, size: 16}}, {{type: center_crop, size: 16}}]
  mean: [0.485, 0.456, 0.406]
  std: [0.229, 0.224, 0.225]
model: {{type: compact_resnet, widths: [8, 16], blocks: [1, 1]}}
train: {{epochs: 2, log_every_steps: 2}}
{})",
                     runs.string(), root.string(), extra);
}

// 1. A class folder renamed in val/ would have scrambled the test labels: now an error, at once.
TEST(FirstHour, ARenamedValidationClassIsAnErrorListingBothSets) {
  TempDir dir;
  write_shapes(dir / "shapes", 6, 2);
  fs::rename(dir / "shapes/val/square", dir / "shapes/val/a_square");
  write_text(dir / "shapes.yaml", shapes_recipe(dir / "shapes", dir / "runs"));
  const Result r = trainer("--config " + (dir / "shapes.yaml").string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, "are not those of the training split: it has a_square, which the training split lacks; "
                            "it lacks square");
  EXPECT_FALSE(fs::exists(dir / "runs/shapes")) << "nothing should be written";
}

// The mapping is logged; num_classes is taken from the folders when left out; eval labels the test
// split by the checkpoint's class names, and needs no --config; RUN:best picks best.pt.
TEST(FirstHour, ClassesAreLoggedAndEvalUsesTheCheckpointsNames) {
  TempDir dir;
  write_shapes(dir / "shapes", 6, 2);
  write_text(dir / "shapes.yaml", shapes_recipe(dir / "shapes", dir / "runs"));
  const Result r = trainer("--config " + (dir / "shapes.yaml").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "data.num_classes: 3, from the training data");
  EXPECT_CONTAINS(r.output, "classes: circle=0, square=1, triangle=2");
  const std::vector<fs::path> runs = {fs::directory_iterator(dir / "runs/shapes")->path()};
  const std::string run = runs.front().string();
  EXPECT_CONTAINS(r.output, "eval --checkpoint " + run + ":best");
  const Result eval = trainer("eval --checkpoint " + run + ":best");
  EXPECT_EQ(eval.exit_code, 0) << eval.output;
  EXPECT_CONTAINS(eval.output, "checkpoint " + run + "/checkpoints/best.pt");
  EXPECT_CONTAINS(eval.output, "(6 samples");
  // predict by class name; the export (the recipe given again, num_classes still left to the data)
  // carries the class names beside the file.
  const Result predict = trainer("predict --checkpoint " + run + ":best " + (dir / "shapes/val/triangle/0.png").string());
  EXPECT_EQ(predict.exit_code, 0) << predict.output;
  EXPECT_CONTAINS(predict.output, "triangle");
  const Result exported = trainer("export --checkpoint " + run + ":best --config " + (dir / "shapes.yaml").string() +
                                  " --output " + (dir / "out/model.ts").string());
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  std::ifstream metadata(dir / "out/model.ts.json");
  const std::string json((std::istreambuf_iterator<char>(metadata)), std::istreambuf_iterator<char>());
  EXPECT_CONTAINS(json, "\"circle\"");
  EXPECT_CONTAINS(json, "\"triangle\"");
  fs::rename(dir / "shapes/val/square", dir / "shapes/val/a_square");
  const Result renamed = trainer("eval --checkpoint " + run);
  EXPECT_EQ(renamed.exit_code, 1) << renamed.output;
  EXPECT_CONTAINS(renamed.output, "are not those of the checkpoint " + run + "/checkpoints/last.pt");
}

// 2. A folder, or an empty file, as --config trained every default into runs/run/.
TEST(FirstHour, AFolderOrAnEmptyFileAsConfigIsRefused) {
  TempDir dir;
  write_shapes(dir / "shapes", 1, 1);
  Result r = trainer("--config " + (dir / "shapes").string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, (dir / "shapes").string() + " is a folder; --config takes a recipe file");
  EXPECT_CONTAINS(r.output, "a folder of images goes in the recipe's data.root");
  write_text(dir / "empty.yaml", "# nothing yet\n\n");
  r = trainer("--config " + (dir / "empty.yaml").string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, "is empty (nothing but comments or blank lines)");
  EXPECT_FALSE(fs::exists("runs/run")) << "trained the defaults";
}

// 3. A batch the data can never fill: an error at once, not minutes of timing and the OOM killer.
TEST(FirstHour, ABatchTheDataCannotFillIsAnErrorAtOnce) {
  TempDir dir;
  stoker::testing::write_synthetic_idx_dataset(dir.path(), 512, 64, 28);
  const auto start = std::chrono::steady_clock::now();
  const Result r = trainer(fmt::format("--config {}/configs/fashion_mnist.yaml --set data.root={} --set "
                                       "data.train_limit=512 --set data.batch_size=60000 --set run.dir={}/runs",
                                       stoker::testing::source_dir(), dir.path().string(), dir.path().string()));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, "data.batch_size (60000) is more than the 512 training samples");
  EXPECT_EQ(r.output.find("timing"), std::string::npos) << "timed steps before the cheap check:\n" << r.output;
  EXPECT_LT(seconds, 120) << "the old behaviour ran for minutes";
}

// 3. The first Ctrl-C during start-up is honoured with a message: during the precision trial where
// this CPU offers two candidates (exit 130, nothing written); else during the first epoch (the
// usual stop with a checkpoint). Either way the signal is not ignored.
TEST(FirstHour, AFirstCtrlCDuringStartUpIsHonouredWithAMessage) {
  TempDir dir;
  stoker::testing::write_synthetic_idx_dataset(dir.path(), 4096, 64, 28);
  const std::string log = (dir / "out.txt").string();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const std::string cfg = std::string(stoker::testing::source_dir()) + "/configs/fashion_mnist.yaml";
    const std::string root = "data.root=" + dir.path().string(), runs = "run.dir=" + (dir / "runs").string();
    freopen(log.c_str(), "w", stdout);
    dup2(fileno(stdout), 2);
    execl(stoker::testing::trainer_bin(), stoker::testing::trainer_bin(), "--config", cfg.c_str(), "--set",
          root.c_str(), "--set", runs.c_str(), "--set", "model.widths=[64,128,256]", "--set", "train.epochs=30",
          "--set", "data.batch_size=256", (char*)nullptr);
    _exit(127);
  }
  bool trial = false;
  for (int i = 0; i < 6000; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const std::string out = stoker::testing::read_bytes(log);
    trial = out.find("train.precision: auto: timing") != std::string::npos;
    if (trial || out.find("run directory:") != std::string::npos) break;
  }
  kill(child, SIGINT);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  const std::string output = stoker::testing::read_bytes(log);
  ASSERT_TRUE(WIFEXITED(status)) << output;
  EXPECT_EQ(WEXITSTATUS(status), 130) << output;
  EXPECT_CONTAINS(output, "stoker: stop requested: stopping after the current step");
  if (trial && output.find("train.precision: auto -> ") == std::string::npos) {
    EXPECT_CONTAINS(output, "stopped: stopped by a signal (Ctrl-C or SIGTERM) during the precision trial");
    EXPECT_FALSE(fs::exists(dir / "runs")) << output;
  } else {
    EXPECT_CONTAINS(output, "stopped early; continue with: ");
  }
}

// 4. A state dict or a recipe where a checkpoint is expected: said what it is and what to do.
TEST(FirstHour, AStateDictOrARecipeWhereACheckpointIsExpectedIsNamed) {
  TempDir dir;
  write_shapes(dir / "shapes", 6, 2);
  write_text(dir / "shapes.yaml", shapes_recipe(dir / "shapes", dir / "runs", "checkpoint: {save_best: false}"));
  ASSERT_EQ(trainer("--config " + (dir / "shapes.yaml").string() + " --set train.epochs=1").exit_code, 0);
  const std::string run = fs::directory_iterator(dir / "runs/shapes")->path().string();
  const std::string weights = (dir / "weights.pt").string();
  ASSERT_EQ(trainer("export --checkpoint " + run + " --format state_dict --output " + weights).exit_code, 0);
  Result r = trainer("eval --checkpoint " + weights);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, weights + " is a state dict or another torch.save file");
  EXPECT_CONTAINS(r.output, "to start a run from its weights set model.pretrained: " + weights);
  r = trainer("--resume " + (dir / "shapes.yaml").string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, "is a text file (a YAML recipe?): recipes go to --config");
  r = trainer("eval --checkpoint " + run + ":best");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, "has no checkpoints/best.pt (checkpoint.save_best is off");
  r = trainer("eval --checkpoint " + (dir / "runs/shapes").string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, "holds 1 run(s) but is not one itself; pass one of them, e.g. the latest: " + run);
}

// 9. ./stoker.sh train with --resume of another recipe's run (or a subcommand) leaves --config alone,
// runs in the user's folder (relative paths mean what they typed), and prints follow-up commands
// with the path the user ran.
TEST(FirstHour, StokerShTrainResumesAnyRecipeFromTheUsersFolder) {
  TempDir dir;
  write_shapes(dir / "shapes", 6, 2);
  write_text(dir / "shapes.yaml", shapes_recipe("shapes", "runs", "checkpoint: {save_best: false}"));
  const fs::path trainer_bin = stoker::testing::trainer_bin();
  const std::string build = trainer_bin.parent_path().parent_path().string();  // <build>/apps/trainer
  const std::string script = std::string(stoker::testing::source_dir()) + "/stoker.sh";
  const std::string env = "cd " + dir.path().string() + " && STOKER_NO_BUILD=1 STOKER_BUILD_DIR=" + build + " ";
  // Relative paths (shapes.yaml, its data.root shapes and run.dir runs) from the user's folder.
  Result r = stoker::testing::run_command(env + script + " train --config shapes.yaml --set train.epochs=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(fs::is_directory(dir / "runs/shapes")) << r.output;
  const std::string run = "runs/shapes/" + fs::directory_iterator(dir / "runs/shapes")->path().filename().string();
  // --resume of this (not the default) recipe's run: continues with its own saved config.
  r = stoker::testing::run_command(env + script + " train --resume " + run + " --set train.epochs=2 --allow-config-change");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "resuming " + run + "/checkpoints/last.pt");
  EXPECT_EQ(r.output.find("fashion_mnist"), std::string::npos) << r.output;
  EXPECT_CONTAINS(r.output, "next:            " + script + " train eval --checkpoint " + run + ";");
  // A subcommand passes through as it is.
  r = stoker::testing::run_command(env + script + " train eval --checkpoint " + run);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "checkpoint " + run + "/checkpoints/last.pt");
}

// 10. --set mistakes name the --set, not the recipe file.
TEST(FirstHour, SetMistakesNameTheSet) {
  TempDir dir;
  write_shapes(dir / "shapes", 1, 1);
  write_text(dir / "shapes.yaml", shapes_recipe(dir / "shapes", dir / "runs"));
  const std::string config = "--config " + (dir / "shapes.yaml").string();
  Result r = trainer(config + " --set trian.epochs=3 --print-config");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, "error: --set trian.epochs: unknown section 'trian'; did you mean train?");
  r = trainer(config + " --set train.epochs 3");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_CONTAINS(r.output, "--set train.epochs: a --set is key.path=value in one word, with '='; write --set "
                            "train.epochs=3");
  r = trainer(config + " --set model.type=ResNet18 --print-config");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, "unknown model type \"ResNet18\"; did you mean resnet18?");
  r = trainer(config + " --set schedule.warmup_epochs=5 --print-config");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, "shapes.yaml with --set schedule.warmup_epochs=5: schedule.warmup_epochs (5) must be "
                            "shorter than train.epochs (2)");
}

}  // namespace
}  // namespace stoker
