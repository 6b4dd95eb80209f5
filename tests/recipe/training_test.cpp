#include "trainer/trainer.h"

#include <gtest/gtest.h>
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <fstream>

#include "data/transform_options.h"
#include "models/compact_resnet.h"
#include "models/registry.h"
#include "test_config.h"
#include "recipe/device.h"
#include "recipe/factory.h"
#include "recipe/run.h"

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
  return testing::synthetic_trainer(config, init_seed);
}

using stoker::testing::StopAtStep;
using stoker::testing::weights;

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
  config.schedule = make_schedule("step");
  config.schedule.curve.as<StepKeys>().milestones = {2};
  config.schedule.curve.as<StepKeys>().gamma = 0.5;
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
  request.config.train.epochs = 3;  // a longer schedule: refused unless allowed
  request.resume = first.run_dir;
  EXPECT_THROW(run_training(request), Error);
  request.allow_config_change = true;
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
  c.data.dataset = data::dataset_type_options("image_folder");
  c.data.num_classes = 2;
  c.data.batch_size = 8;
  c.data.workers = 2;
  c.data.mean = {0.5, 0.5, 0.5};
  c.data.std = {0.25, 0.25, 0.25};
  c.data.train_transforms = {data::make_transform("random_resized_crop"), data::make_transform("horizontal_flip")};
  auto& crop = c.data.train_transforms[0].as<data::RandomResizedCropOptions>();
  crop.size = 16;
  crop.scale = {0.5, 1.0};
  c.data.eval_transforms = {data::make_transform("resize"), data::make_transform("center_crop")};
  c.data.eval_transforms[0].as<data::ResizeOptions>().size = 18;
  c.data.eval_transforms[1].as<data::CenterCropOptions>().size = 16;
  c.train.epochs = 4;
  const TrainOutcome out = run_training(request);
  EXPECT_EQ(out.state.step, 4 * 4);
  EXPECT_GT(out.final_test.top1, 0.9);
  const auto metrics = lines_of(out.run_dir / "metrics.jsonl");
  EXPECT_GT(number_after(metrics.back(), "data_decode_s"), 0.0);
  EXPECT_EQ(number_after(metrics.back(), "bad_samples"), 0.0);
}

// ---- mixed precision, accumulation, strict sizes, CUDA graphs --------------------------------------

// A network without batch norm or dropout, so that the gradient of a batch does not depend on how
// the batch is split.
struct PlainNetImpl : torch::nn::Module {
  PlainNetImpl()
      : body(register_module("body", torch::nn::Sequential(
                                         torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 8, 3).padding(1)),
                                         torch::nn::ReLU(), torch::nn::Flatten(),
                                         torch::nn::Linear(8 * 12 * 12, 10)))) {}
  torch::Tensor forward(const torch::Tensor& x) { return body->forward(x); }
  torch::nn::Sequential body;
};
TORCH_MODULE(PlainNet);

torch::nn::AnyModule plain_net(uint64_t seed) {
  torch::manual_seed(seed);
  return torch::nn::AnyModule(PlainNet());
}

class MixedPrecisionTest : public TrainerTest {
 protected:
  Config config(int64_t batch) const {
    Config c = stoker::testing::tiny_config(data_.path(), runs_.path());
    c.data.batch_size = batch;
    c.data.shuffle = false;
    c.schedule.curve = make_schedule("constant").curve;
    c.schedule.warmup_epochs = 0;
    return c;
  }
  std::unique_ptr<Trainer> trainer(const Config& c, uint64_t seed = 5) {
    const torch::Device cpu(torch::kCPU);
    return stoker::make_trainer(c, plain_net(seed), make_loader(c, cpu, "train"), make_loader(c, cpu, "test"), cpu);
  }
  static std::vector<data::Batch> batches(Trainer& t, const Config& c, int64_t n) {
    auto loader = make_loader(c, torch::kCPU, "train");
    loader->start_epoch(0);
    std::vector<data::Batch> out;
    for (int64_t i = 0; i < n; ++i) out.push_back(*loader->next());
    return out;
  }
};

// Gradients of 4 micro-batches of 8, each loss divided by 4, equal the gradient of one batch of 32
// (to float32 summation-order differences: rtol 1e-5, atol 1e-7); so do the parameters after two
// optimizer steps with momentum and weight decay (rtol 1e-4, atol 1e-6).
TEST_F(MixedPrecisionTest, AccumulatedMicroBatchesEqualOneLargeBatch) {
  Config small = config(8), large = config(32);
  small.train.accumulate_steps = 4;
  auto a = trainer(small), b = trainer(large);
  EXPECT_EQ(a->accumulate_steps(), 4);
  EXPECT_EQ(a->steps_per_epoch(), b->steps_per_epoch());

  const auto micro = batches(*a, small, 8), big = batches(*b, large, 2);
  for (int i = 0; i < 4; ++i) a->backward(a->compute_loss(a->forward(micro[i].input), micro[i].target), 4);
  b->backward(b->compute_loss(b->forward(big[0].input), big[0].target));
  auto pa = a->module().parameters(), pb = b->module().parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(torch::allclose(pa[i].grad(), pb[i].grad(), 1e-5, 1e-7)) << "gradient " << i;
  }

  // Whole steps through train_step: the optimizer steps once per 4 micro-batches.
  auto c = trainer(small), d = trainer(large);
  for (int i = 0; i < 8; ++i) {
    c->train_step(micro[i]);
    EXPECT_EQ(c->state().step, (i + 1) / 4) << "after micro-batch " << i;
  }
  for (int i = 0; i < 2; ++i) d->train_step(big[i]);
  EXPECT_EQ(d->state().step, 2);
  auto pc = c->module().parameters(), pd = d->module().parameters();
  for (size_t i = 0; i < pc.size(); ++i) {
    EXPECT_TRUE(torch::allclose(pc[i], pd[i], 1e-4, 1e-6)) << "parameter " << i;
  }
}

TEST_F(MixedPrecisionTest, EffectiveBatchSizeDerivesAccumulationOrIsAClearError) {
  Config c = config(8);
  c.train.effective_batch_size = 32;
  EXPECT_EQ(batch_arithmetic(c).accumulate_steps, 4);
  const std::string yaml = "data: {batch_size: 8}\ntrain: {effective_batch_size: 36}\n";
  const std::string message = stoker::testing::error_of([&] { parse_config(yaml, "x.yaml"); });
  EXPECT_CONTAINS(message, "train.effective_batch_size (36) must be a multiple of");
  EXPECT_CONTAINS(message, "use 32 or 40");
  EXPECT_CONTAINS(stoker::testing::error_of([&] {
                    parse_config("data: {batch_size: 8}\ntrain: {effective_batch_size: 32, accumulate_steps: 2}\n", "x.yaml");
                  }),
                  "set only one of them");
}

// 640 / 32 = 20 batches in groups of 3: with data.drop_last the epoch ends after its last whole
// step (6 steps, 18 batches: a step never mixes a partial group, whatever the world size); without
// it the epoch ends with a shorter group, which still steps (7 steps).
TEST_F(TrainerTest, AccumulationStepsOncePerGroupAndDropLastEndsTheEpochAfterTheLastWholeStep) {
  for (const bool drop_last : {true, false}) {
    TrainRequest request;
    request.config = stoker::testing::tiny_config(data_.path(), runs_.path());
    request.config.train.accumulate_steps = 3;
    request.config.train.epochs = 2;
    request.config.data.drop_last = drop_last;
    const TrainOutcome out = run_training(request);
    EXPECT_EQ(out.state.step, 2 * (drop_last ? 6 : 7)) << "drop_last " << drop_last;
    EXPECT_GT(out.final_test.top1, 0.5);
  }
}

TEST_F(TrainerTest, Bf16MixedOnTheCpuLearns) {
  TrainRequest request;
  request.config = stoker::testing::tiny_config(data_.path(), runs_.path());
  request.config.train.precision = Precision::kBf16Mixed;
  const TrainOutcome out = run_training(request);
  EXPECT_GT(out.final_test.top1, 0.9) << "bf16-mixed did not learn an easy problem";
}

// bf16-true: parameters, gradients and optimizer state are bfloat16; it still learns.
TEST_F(MixedPrecisionTest, Bf16TrueKeepsEverythingInBfloat16AndLearns) {
  Config c = config(32);
  c.train.precision = Precision::kBf16True;
  auto t = trainer(c);
  for (const auto& p : t->module().parameters()) EXPECT_EQ(p.scalar_type(), torch::kBFloat16);
  const auto all = batches(*t, c, 20);
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (const auto& b : all) t->train_step(b);
  }
  for (const auto& p : t->module().parameters()) {
    EXPECT_EQ(p.scalar_type(), torch::kBFloat16);
  }
  EXPECT_GT(t->evaluate().top1, 0.8) << "bf16-true did not learn an easy problem";
}

// fp16-mixed runs the whole loss-scaling path (on the CPU too); its state is in the checkpoint and
// comes back on resume.
TEST_F(TrainerTest, Fp16MixedSavesAndRestoresTheLossScaler) {
  TrainRequest request;
  request.config = stoker::testing::tiny_config(data_.path(), runs_.path());
  request.config.train.precision = Precision::kFp16Mixed;
  request.config.train.loss_scale.init_scale = 1024;
  request.config.train.loss_scale.growth_interval = 7;  // 20 steps per epoch: grows twice per epoch
  request.config.train.grad_clip_norm = 5.0;            // unscale before clipping, in the loop
  request.config.train.epochs = 2;
  const TrainOutcome out = run_training(request);
  EXPECT_GT(out.final_test.top1, 0.8) << "fp16-mixed did not learn an easy problem";
  const auto metrics = lines_of(out.run_dir / "metrics.jsonl");
  const double scale = number_after(metrics.back(), "loss_scale");
  EXPECT_GE(scale, 1024.0 / 64) << "the scale collapsed";
  EXPECT_NE(scale, 1024.0) << "the scale never changed";

  const torch::Device cpu(torch::kCPU);
  Config c = request.config;
  auto resumed_ptr = stoker::make_trainer(c, models::create_model(c.model, {1, 10}),
                                          make_loader(c, cpu, "train"), make_loader(c, cpu, "test"), cpu);
  Trainer& resumed = *resumed_ptr;
  EXPECT_EQ(resumed.scaler().scale_value(), 1024.0);
  resumed.load_checkpoint(out.run_dir / "checkpoints" / "last.pt");
  EXPECT_EQ(resumed.scaler().scale_value(), scale);
}

TEST_F(TrainerTest, StrictSizesTurnsFindingsIntoAnError) {
  TrainRequest request;
  request.config = stoker::testing::tiny_config(data_.path(), runs_.path());
  request.config.model.as<models::CompactResNetOptions>().widths = {12, 16};
  request.config.data.batch_size = 30;
  request.config.train.strict_sizes = true;
  const std::string message = stoker::testing::error_of([&] { run_training(request); });
  EXPECT_CONTAINS(message, "train.strict_sizes is on and");
  EXPECT_CONTAINS(message, "data.batch_size is 30");
  EXPECT_CONTAINS(message, "out_channels is 12");
  request.config.train.strict_sizes = false;  // warnings only: it trains
  request.config.train.epochs = 1;
  EXPECT_EQ(run_training(request).state.epoch, 1);
}

TEST_F(TrainerTest, CudaGraphWithoutCudaTrainsEagerly) {
  TrainRequest request;
  request.config = stoker::testing::tiny_config(data_.path(), runs_.path());
  request.config.train.cuda_graph = true;
  request.config.train.epochs = 1;
  const TrainOutcome out = run_training(request);
  EXPECT_EQ(out.state.step, 640 / 32);
}

// On a GPU: the graph-captured step gives the same parameters as eager steps on the same batches
// (rtol 1e-3: cuDNN may pick other algorithms on the capture stream).
TEST_F(MixedPrecisionTest, CudaGraphStepMatchesEagerSteps) {
  STOKER_NEEDS_CUDA();
  const torch::Device gpu(torch::kCUDA, 0);
  for (const char* precision : {"fp32", "bf16-mixed", "fp16-mixed"}) {
    Config c = config(32);
    c.run.device = "cuda";
    c.train.precision = parse_precision(precision);
    c.train.grad_clip_norm = 1.0;
    Config g = c;
    g.train.cuda_graph = true;
    auto eager_ptr = stoker::make_trainer(c, plain_net(5), make_loader(c, gpu, "train"), make_loader(c, gpu, "test"), gpu);
    auto graphed_ptr = stoker::make_trainer(g, plain_net(5), make_loader(g, gpu, "train"), make_loader(g, gpu, "test"), gpu);
    Trainer& eager = *eager_ptr;
    Trainer& graphed = *graphed_ptr;
    auto loader = make_loader(c, gpu, "train");
    loader->start_epoch(0);
    for (int i = 0; i < 8; ++i) {
      const data::Batch batch = *loader->next();
      const double le = eager.train_step(batch).item<double>();
      const double lg = graphed.train_step(batch).item<double>();
      EXPECT_NEAR(lg, le, 1e-3 * std::max(1.0, std::abs(le))) << precision << " step " << i;
    }
    EXPECT_TRUE(graphed.graph_active()) << precision << ": the step was not captured";
    auto pe = eager.module().parameters(), pg = graphed.module().parameters();
    for (size_t i = 0; i < pe.size(); ++i) {
      EXPECT_TRUE(torch::allclose(pe[i], pg[i], 1e-3, 1e-5)) << precision << " parameter " << i;
    }
    EXPECT_EQ(graphed.state().step, 8);
  }
}

// On a GPU: after the capture, a short batch (drop_last: false) is stepped eagerly on the graph's
// static gradients, which are zeroed in place first, so it does not add the last replay's gradient
// to its own (issue #12): the parameters still equal an eager run's.
TEST_F(MixedPrecisionTest, CudaGraphThenShortBatchEqualsEagerSteps) {
  STOKER_NEEDS_CUDA();
  const torch::Device gpu(torch::kCUDA, 0);
  Config c = config(48);  // 640 samples: 13 batches of 48 and one of 16
  c.run.device = "cuda";
  c.data.drop_last = false;
  Config g = c;
  g.train.cuda_graph = true;
  auto eager = stoker::make_trainer(c, plain_net(5), make_loader(c, gpu, "train"), make_loader(c, gpu, "test"), gpu);
  auto graphed = stoker::make_trainer(g, plain_net(5), make_loader(g, gpu, "train"), make_loader(g, gpu, "test"), gpu);
  auto loader = make_loader(c, gpu, "train");
  loader->start_epoch(0);
  int64_t steps = 0;
  while (std::optional<data::Batch> batch = loader->next()) {
    eager->train_step(*batch);
    graphed->train_step(*batch);
    ++steps;
  }
  ASSERT_EQ(steps, 14);
  EXPECT_TRUE(graphed->graph_active());
  auto pe = eager->module().parameters(), pg = graphed->module().parameters();
  for (size_t i = 0; i < pe.size(); ++i) EXPECT_TRUE(torch::allclose(pe[i], pg[i], 1e-3, 1e-5)) << "parameter " << i;
}

// Capturing turns an application's own autocast region off, and the weight-cast cache with it, and
// puts both back afterwards (issue #12: stale casts must not be baked into the graph).
TEST(Precision, AutocastIsOffWhileCapturingAndRestoredAfter) {
  AutocastGuard outer(torch::kCPU, Precision::kBf16Mixed);
  ASSERT_TRUE(at::autocast::is_autocast_enabled(torch::kCPU));
  ASSERT_TRUE(at::autocast::is_autocast_cache_enabled());
  {
    AutocastOffForCapture capture(torch::kCPU);
    EXPECT_FALSE(at::autocast::is_autocast_enabled(torch::kCPU));
    EXPECT_FALSE(at::autocast::is_autocast_cache_enabled());
    {
      AutocastGuard step(torch::kCPU, Precision::kBf16Mixed);  // the step's own guard still works
      EXPECT_TRUE(at::autocast::is_autocast_enabled(torch::kCPU));
      EXPECT_EQ(at::autocast::get_autocast_dtype(torch::kCPU), torch::kBFloat16);
    }
    EXPECT_FALSE(at::autocast::is_autocast_enabled(torch::kCPU));
  }
  EXPECT_TRUE(at::autocast::is_autocast_enabled(torch::kCPU));
  EXPECT_TRUE(at::autocast::is_autocast_cache_enabled());
}

}  // namespace
}  // namespace stoker
