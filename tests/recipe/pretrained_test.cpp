// recipe/pretrained.h: model.pretrained in a run — every weights format read, every other file named,
// the one log line, and a resumed run that never reads the file again.
#include "recipe/pretrained.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "models/compact_resnet.h"
#include "models/weights/safetensors.h"
#include "models/weights/state_dict.h"
#include "models/weights/torch_save.h"
#include "recipe/factory.h"
#include "recipe/run.h"
#include "test_config.h"
#include "trainer/checkpoint.h"

namespace stoker {
namespace {
namespace fs = std::filesystem;
using testing::error_of;
using testing::TempDir;

class PretrainedRun : public ::testing::Test {
 protected:
  void SetUp() override { testing::write_synthetic_idx_dataset(data_.path(), 320, 100, 12); }
  Config config() const {
    Config c = testing::tiny_config(data_.path(), runs_.path());
    c.train.epochs = 1;
    return c;
  }
  // A compact_resnet of the tiny config's shape for `classes` classes, its weights saved to `file`.
  models::weights::NamedTensors save_model(const fs::path& file, int64_t classes, int64_t seed) {
    Config c = config();
    c.data.num_classes = classes;
    torch::manual_seed(seed);
    torch::nn::AnyModule m = models::create_model(c.model, {1, classes});
    models::weights::save_state_dict(*m.ptr(), file);
    return models::weights::state_of(*m.ptr());
  }
  TempDir data_, runs_, files_;
};

TEST_F(PretrainedRun, EveryWeightsFormatReadsTheSameTensors) {
  const models::weights::NamedTensors want = save_model(files_ / "sd.pt", 10, 1);
  testing::write_bytes(files_ / "w.safetensors", models::weights::safetensors_bytes(want));
  // A Stoker checkpoint: a run's last.pt.
  TrainRequest request;
  request.config = config();
  const TrainOutcome out = run_training(request);
  const fs::path checkpoint = out.run_dir / "checkpoints/last.pt";
  for (const fs::path& file : {files_ / "sd.pt", files_ / "w.safetensors"}) {
    const models::weights::NamedTensors got = read_weights_file(file);
    ASSERT_EQ(got.size(), want.size()) << file;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].first, want[i].first);
      EXPECT_TRUE(torch::equal(got[i].second, want[i].second)) << file << " " << want[i].first;
    }
  }
  const models::weights::NamedTensors from_checkpoint = read_weights_file(checkpoint);
  EXPECT_EQ(from_checkpoint.size(), want.size());
  // It loads into a new run's model: the line names the file and the tensors.
  Config c = config();
  c.pretrained.file = checkpoint.string();
  torch::nn::AnyModule model = make_model(c, {1});
  EXPECT_EQ(load_pretrained(*model.ptr(), c),
            fmt::format("model.pretrained: {} ({} tensors)", checkpoint.string(), want.size()));
}

TEST_F(PretrainedRun, FilesThatAreNotWeightsAreNamedWithWhatTheyAre) {
  const auto message = [&](const std::string& name, const std::string& bytes) {
    testing::write_bytes(files_ / name, bytes);
    return error_of([&] { read_weights_file(files_ / name); });
  };
  EXPECT_CONTAINS(message("recipe.yaml", "model:\n  type: resnet50\n"),
                  "recipe.yaml is a text file (it starts with \"model:\"), not weights; give a state dict saved with "
                  "torch.save(model.state_dict(), FILE)");
  EXPECT_CONTAINS(message("cat.jpg", std::string("\xff\xd8\xff\xe0", 4) + std::string(100, 'x')),
                  "cat.jpg is a JPEG image, not weights");
  testing::write_png(files_ / "cat.png", 2, 2, 1, {0, 1, 2, 3});
  EXPECT_CONTAINS(error_of([&] { read_weights_file(files_ / "cat.png"); }), "cat.png is a PNG image, not weights");
  const std::string full = models::weights::torch_save_bytes({{"w", torch::ones({1000})}});
  EXPECT_CONTAINS(message("half.pt", full.substr(0, full.size() / 2)), "half.pt is a damaged or truncated zip archive");
  EXPECT_CONTAINS(message("empty.pt", ""), "empty.pt is empty (0 bytes)");
  EXPECT_CONTAINS(error_of([&] { read_weights_file(files_ / "absent.pth"); }),
                  "absent.pth is missing (no such file); download the weights first");
  EXPECT_CONTAINS(message("legacy.pth", std::string("\x80\x02\x8a\x0a", 4) + std::string(50, '\0')),
                  "legacy.pth is a Python pickle (torch.save's format before PyTorch 1.6, or pickle.dump), which "
                  "Stoker does not read; save it again in the zip format");
  EXPECT_CONTAINS(message("nothing.pt", models::weights::torch_save_bytes({})), "nothing.pt holds an empty dict, no weights");
}

TEST_F(PretrainedRun, AHeadForOtherClassesIsReinitialisedInOneLine) {
  save_model(files_ / "five.pt", 5, 3);
  Config c = config();
  c.pretrained.file = (files_ / "five.pt").string();
  torch::nn::AnyModule model = make_model(c, {1});
  const std::string line = load_pretrained(*model.ptr(), c);
  EXPECT_CONTAINS(line, "model.pretrained: " + c.pretrained.file + " (");
  EXPECT_CONTAINS(line, " tensors; head classifier re-initialised for 10 classes)");
  // Another architecture's file is an error naming the file and the keys.
  Config wide = c;
  wide.model = models::compact_resnet({16, 32}, {1, 1});
  torch::nn::AnyModule other = make_model(wide, {1});
  EXPECT_CONTAINS(error_of([&] { load_pretrained(*other.ptr(), wide); }),
                  "does not fit model.type compact_resnet");
}

// The pretrained weights start a new run; a resumed run takes its weights from the checkpoint and
// never opens the file (deleted here between the runs).
TEST_F(PretrainedRun, ANewRunStartsFromTheFileAndItsResumeNeverReadsIt) {
  const models::weights::NamedTensors file = save_model(files_ / "pre.pt", 10, 5);
  Config c = config();
  c.pretrained.file = (files_ / "pre.pt").string();
  {
    TrainingSetup setup = make_training(c);
    const auto params = setup.trainer->module().named_parameters();
    EXPECT_TRUE(torch::equal(params["features.stem_conv.weight"], file.front().second));
  }
  TrainRequest request;
  request.config = c;
  const TrainOutcome first = run_training(request);
  EXPECT_CONTAINS(testing::read_bytes(first.run_dir / "train.log"),
                  fmt::format("model.pretrained: {} ({} tensors)", c.pretrained.file, file.size()));
  fs::remove(files_ / "pre.pt");
  TrainRequest resume;
  resume.config = c;
  resume.config.train.epochs = 2;
  resume.allow_config_change = true;
  resume.resume = first.run_dir;
  const TrainOutcome second = run_training(resume);
  EXPECT_EQ(second.state.epoch, 2);
  // Without a checkpoint the missing file is an error naming it.
  TrainRequest fresh;
  fresh.config = c;
  EXPECT_CONTAINS(error_of([&] { run_training(fresh); }), "pre.pt is missing (no such file)");
}

TEST(PretrainedConfig, SkipOrRenameWithoutAFileAndFreezeUntilWithoutPatternsAreErrors) {
  EXPECT_CONTAINS(error_of([] { parse_config("model: {pretrained_skip: [fc]}\n", "r.yaml"); }),
                  "r.yaml: model.pretrained_skip is set, but model.pretrained is not");
  EXPECT_CONTAINS(error_of([] { parse_config("model: {pretrained_rename: {\"a.\": \"\"}}\n", "r.yaml"); }),
                  "model.pretrained_rename is set, but model.pretrained is not");
  const Config c = parse_config("model: {type: resnet18, pretrained: w.pth, pretrained_skip: [fc, \"*.bn1\"], "
                                "pretrained_rename: {\"backbone.\": \"\", \"head.\": \"fc.\"}}\n",
                                "r.yaml");
  EXPECT_EQ(c.pretrained.skip, (std::vector<std::string>{"fc", "*.bn1"}));
  EXPECT_EQ(c.pretrained.rename, (StringPairs{{"backbone.", ""}, {"head.", "fc."}}));
  EXPECT_EQ(config_to_yaml(parse_config(config_to_yaml(c), "again")), config_to_yaml(c));
  EXPECT_CONTAINS(error_of([] { parse_config("model: {pretrained_rename: [a]}\n", "r.yaml"); }),
                  "model.pretrained_rename at line 1: expected a mapping of names to strings");
}

// The files torchvision, Lightning, timm's train.py, DDP and the Hugging Face hub write (made by
// tests/models/finetune_python.py from one 1000-class torchvision resnet18) start a 10-class resnet18
// with the same weights and one line naming the re-initialised head; a pickled module, the legacy format
// and a TorchScript file are refused, saying what they are.
TEST(PretrainedPython, TorchvisionLightningTimmDdpAndSafetensorsFilesStartAFineTune) {
  std::string why;
  const fs::path python = testing::venv_python(&why);
  if (python.empty()) GTEST_SKIP() << why;
  if (testing::shell("'" + python.string() + "' -c 'import torchvision, safetensors' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "torchvision or safetensors is not installed in " << python.string()
                 << "; install them with `bash bench/setup.sh`";
  }
  TempDir tmp;
  const std::string script = std::string(STOKER_SOURCE_DIR) + "/tests/models/finetune_python.py";
  ASSERT_EQ(testing::shell("'" + python.string() + "' '" + script + "' checkpoints '" + tmp.path().string() + "'"), 0);
  const Config c = parse_config("model: {type: resnet18}\ndata: {num_classes: 10, mean: [0.5, 0.5, 0.5], "
                                "std: [0.2, 0.2, 0.2]}\n",
                                "r.yaml");
  const models::weights::NamedTensors reference = read_weights_file(tmp / "tv_resnet18.pth");
  for (const std::string name : {"tv_resnet18.pth", "lightning.ckpt", "timm_train.pth.tar", "ddp.pth",
                                 "tv_resnet18.safetensors"}) {
    SCOPED_TRACE(name);
    Config with = c;
    with.pretrained.file = (tmp / name).string();
    torch::nn::AnyModule model = make_model(with, {3});
    const std::string line = load_pretrained(*model.ptr(), with);
    EXPECT_CONTAINS(line, "(120 tensors; head fc re-initialised for 10 classes");
    const auto params = model.ptr()->named_parameters();
    for (const auto& [key, tensor] : reference) {
      if (key.rfind("fc.", 0) != 0 && params.contains(key)) EXPECT_TRUE(torch::equal(params[key], tensor)) << key;
    }
  }
  EXPECT_CONTAINS(error_of([&] { read_weights_file(tmp / "whole_model.pth"); }),
                  "holds a pickled torchvision.models.resnet.ResNet object (torch.save(model) saves the whole module)");
  EXPECT_CONTAINS(error_of([&] { read_weights_file(tmp / "legacy.pth"); }),
                  "torch.save's format before PyTorch 1.6");
}

}  // namespace
}  // namespace stoker
