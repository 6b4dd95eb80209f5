// The ImageNet recipes that follow published results (configs/imagenet_resnet50_a3.yaml, RSB A3;
// configs/imagenet_resnet50_tv2.yaml, torchvision's v2 recipe) load with the settings their headers
// claim, and run as shipped for one epoch on a tiny ImageFolder of PNGs in ImageNet's place (small
// images, batches and warm-up by --set; the model, loss, augmentation, optimizer and EMA as shipped).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "data/batch_ops.h"
#include "data/mixup.h"
#include "data/random_erasing.h"
#include "data/transform_options.h"
#include "recipe/run.h"
#include "test_config.h"
#include "test_util.h"

namespace stoker {
namespace {
namespace fs = std::filesystem;
using stoker::testing::TempDir;

std::string recipe(const char* name) { return std::string(STOKER_SOURCE_DIR) + "/configs/" + name; }

// Two classes of differently sized PNGs, `train` and `val` of each.
void write_image_folder(const fs::path& root, int train, int val) {
  for (int c = 0; c < 2; ++c) {
    for (const char* split : {"train", "val"}) {
      const fs::path dir = root / split / ("class" + std::to_string(c));
      fs::create_directories(dir);
      for (int i = 0; i < (std::string(split) == "train" ? train : val); ++i) {
        const int64_t h = 36 + i % 5, w = 40 + i % 7;
        std::vector<uint8_t> pixels(h * w * 3);
        for (size_t p = 0; p < pixels.size(); ++p) pixels[p] = static_cast<uint8_t>(40 + 150 * c + (p * 13 + i) % 50);
        stoker::testing::write_png(dir / (std::to_string(i) + ".png"), h, w, 3, pixels);
      }
    }
  }
}

// One epoch of `name` on 2 x 12 training and 2 x 4 test PNGs, batches of 4 at 32 px.
TrainOutcome smoke_run(const char* name, const fs::path& data, const fs::path& runs) {
  TrainRequest request;
  request.config = load_config(recipe(name), {"data.root=" + data.string(), "run.dir=" + runs.string(),
                                              "run.device=cpu", "run.threads=1", "train.epochs=1",
                                              "schedule.warmup_epochs=0.5", "data.num_classes=2",
                                              "data.batch_size=4", "data.eval_batch_size=8", "data.workers=1",
                                              "data.train_transforms[0].size=32", "data.eval_transforms[0].size=34",
                                              "data.eval_transforms[1].size=32", "data.eval_size=32",
                                              "train.log_every_steps=1"});
  return run_training(request);
}

TEST(PublishedRecipes, A3LoadsWithTheSettingsItsHeaderNames) {
  const Config c = load_config(recipe("imagenet_resnet50_a3.yaml"));
  EXPECT_EQ(c.model.type(), "resnet50");
  EXPECT_EQ(c.train.epochs, 100);
  EXPECT_EQ(c.loss.type(), "bce");
  EXPECT_EQ(c.data.train_transforms[0].as<data::RandomResizedCropOptions>().size, 160);
  EXPECT_EQ(c.data.eval_transforms[1].as<data::CenterCropOptions>().size, 224);
  ASSERT_EQ(c.data.train_transforms.size(), 3u);
  EXPECT_EQ(c.data.train_transforms[2].as<data::RandAugmentOptions>().policy, "rand-m6-mstd0.5-inc1");
  EXPECT_EQ(c.data.eval_size, 224);  // trains at 160, tests at 224
  ASSERT_EQ(c.data.batch_ops.size(), 1u);  // mixup alone, no random_erasing
  EXPECT_EQ(c.data.batch_ops[0].type(), "mixup");
  EXPECT_DOUBLE_EQ(c.data.batch_ops[0].as<data::MixupSettings>().mixup_alpha, 0.1);
  EXPECT_DOUBLE_EQ(c.data.batch_ops[0].as<data::MixupSettings>().cutmix_alpha, 1.0);
  EXPECT_EQ(c.data.repeated_augmentation, 1);
  EXPECT_EQ(c.optimizer.algorithm.type(), "lamb");
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.008);
  EXPECT_EQ(c.optimizer.lr_reference_batch, 2048);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.02);
  EXPECT_DOUBLE_EQ(c.schedule.warmup_epochs, 5);
}

TEST(PublishedRecipes, TorchvisionV2LoadsWithTheSettingsItsHeaderNames) {
  const Config c = load_config(recipe("imagenet_resnet50_tv2.yaml"));
  EXPECT_EQ(c.model.type(), "resnet50");
  EXPECT_EQ(c.train.epochs, 600);
  EXPECT_EQ(c.optimizer.algorithm.type(), "sgd");
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.5);
  EXPECT_EQ(c.optimizer.lr_reference_batch, 1024);
  EXPECT_DOUBLE_EQ(c.train.label_smoothing, 0.1);
  ASSERT_EQ(c.data.batch_ops.size(), 2u);
  EXPECT_DOUBLE_EQ(c.data.batch_ops[0].as<data::RandomErasingSettings>().probability, 0.1);
  EXPECT_DOUBLE_EQ(c.data.batch_ops[1].as<data::MixupSettings>().mixup_alpha, 0.2);
  EXPECT_EQ(c.data.repeated_augmentation, 4);
  EXPECT_GT(c.train.ema_decay, 0.0);
  EXPECT_EQ(c.data.train_transforms[0].as<data::RandomResizedCropOptions>().size, 176);
  EXPECT_EQ(c.data.eval_transforms[0].as<data::ResizeOptions>().size, 232);
  ASSERT_EQ(c.data.train_transforms.size(), 3u);
  EXPECT_EQ(c.data.train_transforms[2].type(), "trivial_augment_wide");
  EXPECT_EQ(c.data.eval_size, 224);  // trains at 176, tests at 224
}

// A bad key or value of the pixel transforms names the key and what it takes.
TEST(PublishedRecipes, PixelTransformErrorsNameTheKey) {
  const std::string unknown = stoker::testing::error_of(
      [] { load_config(recipe("imagenet_resnet50_tv2.yaml"), {"data.train_transforms[2].magnitude=3"}); });
  EXPECT_CONTAINS(unknown, "magnitude");
  EXPECT_CONTAINS(unknown, "num_magnitude_bins");  // what trivial_augment_wide takes
  const std::string bad = stoker::testing::error_of(
      [] { load_config(recipe("imagenet_resnet50_a3.yaml"), {"data.train_transforms[2].policy=rand-m11"}); });
  EXPECT_CONTAINS(bad, "train_transforms[2]");
  EXPECT_CONTAINS(bad, "m must be in [0, 10]");
}

TEST(PublishedRecipes, A3RunsOneEpoch) {
  TempDir data, runs;
  write_image_folder(data.path(), 12, 4);
  const TrainOutcome out = smoke_run("imagenet_resnet50_a3.yaml", data.path(), runs.path());
  EXPECT_EQ(out.state.epoch, 1);
  EXPECT_EQ(out.state.step, 6);
  EXPECT_EQ(out.final_test.samples, 8);
  const std::string log = stoker::testing::read_bytes(out.run_dir / "train.log");
  EXPECT_NE(log.find("data.batch_ops[0] (mixup): "), std::string::npos);
}

TEST(PublishedRecipes, TorchvisionV2RunsOneEpoch) {
  TempDir data, runs;
  write_image_folder(data.path(), 12, 4);
  const TrainOutcome out = smoke_run("imagenet_resnet50_tv2.yaml", data.path(), runs.path());
  EXPECT_EQ(out.state.epoch, 1);
  EXPECT_EQ(out.state.step, 6);  // 24 entries (6 distinct samples, 4 repeats each) in batches of 4
  EXPECT_EQ(out.final_test.samples, 8);
  EXPECT_EQ(out.final_ema_test.samples, 8);
  const std::string log = stoker::testing::read_bytes(out.run_dir / "train.log");
  EXPECT_NE(log.find("data.batch_ops[0] (random_erasing): "), std::string::npos);
}

}  // namespace
}  // namespace stoker
