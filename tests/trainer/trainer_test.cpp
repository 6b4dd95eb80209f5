#include "trainer/trainer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>

#include "models/compact_resnet.h"
#include "test_util.h"
#include "trainer/run.h"

namespace stoker {
namespace {
namespace fs = std::filesystem;
using stoker::testing::TempDir;

std::vector<std::string> lines_of(const fs::path& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

size_t count_containing(const std::vector<std::string>& lines, const std::string& part) {
  size_t n = 0;
  for (const auto& l : lines) n += l.find(part) != std::string::npos;
  return n;
}

double number_after(const std::string& line, const std::string& key) {
  const auto at = line.find("\"" + key + "\":");
  EXPECT_NE(at, std::string::npos) << key << " in " << line;
  return std::stod(line.substr(at + key.size() + 3));
}

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override { stoker::testing::write_synthetic_idx_dataset(data_.path(), 640, 200, 12); }
  TempDir data_, runs_;
};

TEST_F(TrainerTest, TinyRunLearnsAndWritesItsRunDirectory) {
  TrainRequest request;
  request.config = stoker::testing::tiny_config(data_.path(), runs_.path());
  const TrainOutcome out = run_training(request);

  EXPECT_EQ(out.state.epoch, 3);
  EXPECT_EQ(out.state.step, 3 * (640 / 32));
  EXPECT_EQ(out.fit.epochs.size(), 3u);
  EXPECT_GT(out.final_test.top1, 0.9) << "did not learn an easy problem";
  EXPECT_GE(out.final_test.top5, out.final_test.top1);
  EXPECT_EQ(out.final_ema_test.samples, 0) << "no EMA unless train.ema_decay is set";

  const auto metrics = lines_of(out.run_dir / "metrics.jsonl");
  ASSERT_EQ(count_containing(metrics, "\"kind\":\"epoch\""), 3u);
  ASSERT_GE(count_containing(metrics, "\"kind\":\"step\""), 10u);
  const double first_loss = number_after(metrics.front(), "loss");
  const double last_train_loss = number_after(metrics.back(), "train_loss");
  EXPECT_LT(last_train_loss, 0.6 * first_loss) << "the loss did not go down";
  for (const char* key : {"lr", "samples_per_s", "data_wait"}) {
    EXPECT_GE(number_after(metrics.front(), key), 0.0);
  }
  for (const char* key : {"test_loss", "test_top1", "test_top5", "epoch_seconds"}) {
    EXPECT_GE(number_after(metrics.back(), key), 0.0);
  }

  EXPECT_EQ(config_to_yaml(load_config(out.run_dir / "config.yaml")), config_to_yaml(request.config));
  EXPECT_GT(fs::file_size(out.run_dir / "train.log"), 0u);
  EXPECT_NE(stoker::testing::read_bytes(out.run_dir / "train.log").find("epoch 3/3"), std::string::npos);
  EXPECT_TRUE(fs::is_regular_file(out.run_dir / "checkpoints/last.pt"));
  EXPECT_TRUE(fs::is_regular_file(out.run_dir / "checkpoints/best.pt"));
  EXPECT_EQ(out.run_dir.parent_path(), runs_.path() / "tiny");
}

// Builds a Trainer on the synthetic data with a model initialised from `init_seed`.
std::unique_ptr<Trainer> make_trainer(const Config& config, uint64_t init_seed) {
  configure_threads(config.run.threads);
  Loaders loaders = make_loaders(config, torch::kCPU);
  models::ModelSpec spec;
  spec.widths = config.model.widths;
  spec.blocks = config.model.blocks;
  spec.dropout = config.model.dropout;
  torch::manual_seed(init_seed);
  return std::make_unique<Trainer>(config, models::create_model(spec), loaders.train, loaders.test,
                                   torch::kCPU);
}

std::vector<torch::Tensor> weights(Trainer& t) {
  std::vector<torch::Tensor> out;
  for (const auto& p : t.module().parameters()) out.push_back(p.detach().clone());
  for (const auto& b : t.module().buffers()) out.push_back(b.detach().clone());
  return out;
}

// Stops the trainer after a given optimizer step.
struct StopAtStep : Callback {
  explicit StopAtStep(int64_t s) : step(s) {}
  void on_train_step_end(Trainer& t, const StepInfo& info) override {
    if (info.step == step) t.request_stop();
  }
  int64_t step;
};

TEST_F(TrainerTest, ResumeMidEpochContinuesExactlyWhereItStopped) {
  const Config config = stoker::testing::tiny_config(data_.path(), runs_.path());

  auto straight = make_trainer(config, 1);
  straight->fit();
  const auto expected = weights(*straight);

  // Stop in the middle of the second epoch, checkpoint, and continue in a fresh Trainer whose model
  // starts from other weights: everything must come from the checkpoint.
  auto first = make_trainer(config, 1);
  first->add_callback(std::make_shared<StopAtStep>(27));
  const FitResult partial = first->fit();
  EXPECT_TRUE(partial.interrupted);
  EXPECT_EQ(first->state().epoch, 1);
  EXPECT_EQ(first->state().batch_in_epoch, 7);
  first->save_checkpoint(runs_ / "mid.pt");

  auto second = make_trainer(config, 999);
  second->load_checkpoint(runs_ / "mid.pt");
  EXPECT_EQ(second->state().step, 27);
  const FitResult rest = second->fit();
  EXPECT_FALSE(rest.interrupted);
  EXPECT_EQ(second->state().step, straight->state().step);

  const auto got = weights(*second);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    // Same ops in the same order on one thread: equal up to float rounding.
    EXPECT_TRUE(torch::allclose(got[i], expected[i], 1e-5, 1e-6)) << "tensor " << i;
  }
}

TEST_F(TrainerTest, EmaIsEvaluatedEachEpochAndResumesExactly) {
  Config config = stoker::testing::tiny_config(data_.path(), runs_.path());
  config.train.ema_decay = 0.9;
  config.train.ema_warmup = true;

  auto straight = make_trainer(config, 1);
  const FitResult full = straight->fit();
  ASSERT_EQ(full.epochs.size(), 3u);
  for (const EpochResult& e : full.epochs) {
    EXPECT_EQ(e.ema_test.samples, 200);
    EXPECT_GT(e.ema_test.top5, 0.0);
    EXPECT_NE(e.ema_test.loss, e.test.loss) << "the EMA was not the one evaluated";
  }
  EXPECT_GT(full.epochs.back().ema_test.top1, 0.8) << "the EMA of a model that learns should too";
  ASSERT_NE(straight->ema(), nullptr);
  EXPECT_EQ(straight->ema()->updates(), straight->state().step);
  const auto expected = straight->ema()->named_tensors();

  auto first = make_trainer(config, 1);
  first->add_callback(std::make_shared<StopAtStep>(27));
  first->fit();
  first->save_checkpoint(runs_ / "mid.pt");
  auto second = make_trainer(config, 999);
  second->load_checkpoint(runs_ / "mid.pt");
  EXPECT_EQ(second->ema()->updates(), 27);
  second->fit();
  const auto got = second->ema()->named_tensors();
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, expected[i].first);
    EXPECT_TRUE(torch::allclose(got[i].second.to(torch::kDouble), expected[i].second.to(torch::kDouble), 1e-5, 1e-6))
        << got[i].first;
  }
}

TEST_F(TrainerTest, LrAtCountsOptimizerStepsAndScalesWithTheGlobalBatch) {
  Config config = stoker::testing::tiny_config(data_.path(), runs_.path());
  config.schedule.type = "step";
  config.schedule.warmup_epochs = 0;
  config.schedule.milestones = {2};
  config.schedule.gamma = 0.5;
  config.optimizer.lr_reference_batch = 16;  // batch 32: twice optimizer.lr
  auto trainer = make_trainer(config, 1);
  ASSERT_EQ(trainer->steps_per_epoch(), 20);
  EXPECT_DOUBLE_EQ(trainer->lr_at(0), 2 * 0.05);
  EXPECT_DOUBLE_EQ(trainer->lr_at(39), 2 * 0.05);
  EXPECT_DOUBLE_EQ(trainer->lr_at(40), 0.05);
}

TEST_F(TrainerTest, ResumeFromRunDirectoryAddsEpochs) {
  TrainRequest request;
  request.config = stoker::testing::tiny_config(data_.path(), runs_.path());
  request.config.train.epochs = 2;
  const TrainOutcome first = run_training(request);
  ASSERT_EQ(first.state.epoch, 2);

  request.config.train.epochs = 3;
  request.resume = first.run_dir;
  const TrainOutcome second = run_training(request);
  EXPECT_EQ(second.run_dir, first.run_dir);
  EXPECT_EQ(second.state.epoch, 3);
  EXPECT_EQ(second.state.step, 3 * (640 / 32));
  EXPECT_EQ(second.fit.epochs.size(), 1u);
  EXPECT_EQ(count_containing(lines_of(first.run_dir / "metrics.jsonl"), "\"kind\":\"epoch\""), 3u);
  EXPECT_TRUE(fs::exists(first.run_dir / fmt::format("config.resumed-step{}.yaml", 2 * (640 / 32))));
}

TEST(TrainerImageFolder, TrainsFromImageFilesWithWorkersAndTransforms) {
  TempDir data, runs;
  // Two classes of differently sized PNGs: dark and bright.
  for (int c = 0; c < 2; ++c) {
    for (const char* split : {"train", "val"}) {
      fs::create_directories(data / split / ("class" + std::to_string(c)));
      for (int i = 0; i < 16; ++i) {
        const int64_t h = 20 + i % 5, w = 24 + i % 7;
        stoker::testing::write_png(data / split / ("class" + std::to_string(c)) / (std::to_string(i) + ".png"),
                                   h, w, 3, std::vector<uint8_t>(h * w * 3, static_cast<uint8_t>(40 + 160 * c + i)));
      }
    }
  }
  TrainRequest request;
  request.config = stoker::testing::tiny_config(data.path(), runs.path());
  Config& c = request.config;
  c.data.type = "image_folder";
  c.data.num_classes = 2;
  c.data.batch_size = 8;
  c.data.workers = 2;
  c.data.mean = {0.5, 0.5, 0.5};
  c.data.std = {0.25, 0.25, 0.25};
  c.data.train_transforms = {data::TransformSpec{"random_resized_crop", 16, {0.5, 1.0}},
                             data::TransformSpec{"horizontal_flip"}};
  c.data.eval_transforms = {data::TransformSpec{"resize", 18}, data::TransformSpec{"center_crop", 16}};
  c.train.epochs = 4;
  const TrainOutcome out = run_training(request);
  EXPECT_EQ(out.state.step, 4 * 4);
  EXPECT_GT(out.final_test.top1, 0.9);
  const auto metrics = lines_of(out.run_dir / "metrics.jsonl");
  EXPECT_GT(number_after(metrics.back(), "data_decode_s"), 0.0);
  EXPECT_EQ(number_after(metrics.back(), "bad_samples"), 0.0);
}

TEST(Optimizer, NoWeightDecayOnNormsAndBiases) {
  models::ModelSpec spec;
  spec.widths = {4};
  spec.blocks = {1};
  torch::nn::AnyModule model = models::create_model(spec);
  auto sgd = make_optimizer(OptimizerOptions(), *model.ptr());
  ASSERT_EQ(sgd->param_groups().size(), 2u);
  for (const auto& p : sgd->param_groups()[0].params()) EXPECT_GT(p.dim(), 1);
  for (const auto& p : sgd->param_groups()[1].params()) EXPECT_LE(p.dim(), 1);
  EXPECT_EQ(static_cast<torch::optim::SGDOptions&>(sgd->param_groups()[1].options()).weight_decay(), 0.0);
  OptimizerOptions all;
  all.decay_norm_and_bias = true;
  all.type = "adamw";
  EXPECT_EQ(make_optimizer(all, *model.ptr())->param_groups().size(), 1u);
}

}  // namespace
}  // namespace stoker
