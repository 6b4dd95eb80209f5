// The Trainer built from parts by hand, as an application embeds it (README, "Embedding"): its own
// model, a plain libtorch optimizer, its own loss and schedule, batches held in memory, no Config.
#include "trainer/trainer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "data/augmented_source.h"
#include "data/tensor_batches.h"
#include "test_util.h"

namespace stoker {
namespace {

// `n` batches of `size` 1x4x4 inputs in 3 classes (the class is the argmax of a fixed linear map,
// so the problem is learnable).
std::vector<data::Batch> make_batches(int64_t n, int64_t size, uint64_t seed) {
  torch::manual_seed(seed);
  const torch::Tensor map = torch::randn({16, 3});
  std::vector<data::Batch> out;
  for (int64_t i = 0; i < n; ++i) {
    data::Batch b;
    b.input = torch::randn({size, 1, 4, 4});
    b.target = b.input.flatten(1).matmul(map).argmax(1);
    b.index = i;
    out.push_back(b);
  }
  return out;
}

// The same batches as an in-memory source, in their order.
std::shared_ptr<data::TensorBatches> memory_source(int64_t n, int64_t size, uint64_t seed) {
  std::vector<torch::Tensor> inputs, targets;
  for (const data::Batch& b : make_batches(n, size, seed)) {
    inputs.push_back(b.input);
    targets.push_back(b.target);
  }
  return std::make_shared<data::TensorBatches>(torch::cat(inputs), torch::cat(targets), size, torch::kCPU,
                                               /*shuffle=*/false);
}

struct TinyNetImpl : torch::nn::Module {
  TinyNetImpl() : fc(register_module("fc", torch::nn::Linear(16, 3))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc(x.flatten(1)); }
  torch::nn::Linear fc;
};
TORCH_MODULE(TinyNet);

TinyNet net(uint64_t seed) {
  torch::manual_seed(seed);
  return TinyNet();
}

torch::Tensor smoothed_cross_entropy(const torch::Tensor& logits, const torch::Tensor& target) {
  namespace F = torch::nn::functional;
  return F::cross_entropy(logits, target, F::CrossEntropyFuncOptions().label_smoothing(0.2));
}

// `model` with plain SGD at `lr`, nothing else.
TrainerParts sgd_parts(TinyNet model, double lr = 0.1) {
  TrainerParts parts;
  parts.model = torch::nn::AnyModule(model);
  parts.optimizer = std::make_unique<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(lr));
  return parts;
}

double falling_lr(int64_t step) { return 0.1 / static_cast<double>(1 + step); }

// Records the learning rate of every step.
struct LrLog : Callback {
  std::vector<double> lrs;
  void on_train_step_end(Trainer&, const StepInfo& info) override { lrs.push_back(info.lr); }
};

struct Built {
  std::unique_ptr<Trainer> trainer;
  std::shared_ptr<data::TensorBatches> train;
};

Built build(TrainerParts parts, TrainerOptions options = {}) {
  Built b;
  b.train = memory_source(5, 8, 11);
  auto eval = memory_source(2, 10, 12);
  b.trainer = std::make_unique<Trainer>(std::move(options), std::move(parts), b.train, eval);
  return b;
}

// fit() on the handed parts trains exactly as the plain libtorch loop over the same parts: the loss
// part is the loss, the schedule part sets each step's learning rate.
TEST(TrainerParts, FitRunsTheHandedPartsAsAPlainLoopDoes) {
  TinyNet model = net(3);
  int64_t loss_calls = 0;
  TrainerParts parts;
  parts.model = torch::nn::AnyModule(model);
  parts.optimizer = std::make_unique<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  parts.loss = [&loss_calls](const torch::Tensor& logits, const torch::Tensor& target) {
    ++loss_calls;
    return smoothed_cross_entropy(logits, target);
  };
  parts.schedule = falling_lr;
  TrainerOptions options;
  options.epochs = 2;
  Built b = build(std::move(parts), options);
  auto lr_log = std::make_shared<LrLog>();
  b.trainer->add_callback(lr_log);
  const FitResult result = b.trainer->fit();

  TinyNet plain = net(3);
  torch::optim::SGD sgd(plain->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  int64_t step = 0;
  std::vector<double> top1;  // the training top-1 of each epoch: logits before each step's update
  for (int epoch = 0; epoch < 2; ++epoch) {
    b.train->start_epoch(epoch, 0);
    int64_t correct = 0, seen = 0;
    while (std::optional<data::Batch> batch = b.train->next()) {
      static_cast<torch::optim::SGDOptions&>(sgd.param_groups()[0].options()).lr(falling_lr(step++));
      sgd.zero_grad();
      const torch::Tensor logits = plain->forward(batch->input);
      correct += logits.argmax(1).eq(batch->target).sum().item<int64_t>();
      seen += batch->size();
      smoothed_cross_entropy(logits, batch->target).backward();
      sgd.step();
    }
    top1.push_back(static_cast<double>(correct) / static_cast<double>(seen));
  }

  ASSERT_EQ(result.epochs.size(), 2u);
  EXPECT_EQ(b.trainer->state().step, 10);
  EXPECT_EQ(loss_calls, 10);  // training only: evaluation reports plain cross-entropy
  EXPECT_EQ(result.epochs[1].test.samples, 20);
  ASSERT_EQ(lr_log->lrs.size(), 10u);
  for (int64_t s = 0; s < 10; ++s) EXPECT_DOUBLE_EQ(lr_log->lrs[s], falling_lr(s)) << "step " << s;
  EXPECT_DOUBLE_EQ(result.epochs[0].train_top1, top1[0]);
  EXPECT_DOUBLE_EQ(result.epochs[1].train_top1, top1[1]);
  const auto trained = model->parameters(), expected = plain->parameters();
  for (size_t i = 0; i < trained.size(); ++i) {
    EXPECT_TRUE(torch::allclose(trained[i], expected[i], 1e-6, 1e-7)) << "parameter " << i;
  }
}

// The batches of `inner` with soft targets, as mixup hands them out: 0.6 of the sample's class and
// 0.4 of the class of the batch's sample in reversed order.
class SoftTargets : public data::BatchSource {
 public:
  explicit SoftTargets(std::shared_ptr<data::BatchSource> inner) : inner_(std::move(inner)) {}
  int64_t num_batches() const override { return inner_->num_batches(); }
  int64_t num_samples() const override { return inner_->num_samples(); }
  int64_t channels() const override { return inner_->channels(); }
  int64_t out_height() const override { return inner_->out_height(); }
  int64_t out_width() const override { return inner_->out_width(); }
  void start_epoch(int64_t epoch, int64_t first_batch) override { inner_->start_epoch(epoch, first_batch); }
  std::optional<data::Batch> next() override {
    std::optional<data::Batch> b = inner_->next();
    if (b) {
      const torch::Tensor one_hot = torch::one_hot(b->target, 3).to(torch::kFloat32);
      b->target = 0.6 * one_hot + 0.4 * one_hot.flip(0);
    }
    return b;
  }

 private:
  std::shared_ptr<data::BatchSource> inner_;
};

// With soft targets (mixup, cutmix) the training top-1 counts a sample right when its largest logit is
// its target's dominant class.
TEST(TrainerParts, TrainingTopOneOfSoftTargetsIsAgainstTheDominantClass) {
  TrainerOptions options;
  options.epochs = 1;
  auto memory = memory_source(5, 8, 11);
  Trainer trainer(options, sgd_parts(net(5)), std::make_shared<SoftTargets>(memory));
  const FitResult result = trainer.fit();

  TinyNet plain = net(5);
  torch::optim::SGD sgd(plain->parameters(), torch::optim::SGDOptions(0.1));
  SoftTargets soft(memory);
  soft.start_epoch(0, 0);
  int64_t correct = 0;
  while (std::optional<data::Batch> batch = soft.next()) {
    sgd.zero_grad();
    const torch::Tensor logits = plain->forward(batch->input);
    correct += logits.argmax(1).eq(batch->target.argmax(1)).sum().item<int64_t>();
    torch::nn::functional::cross_entropy(logits, batch->target).backward();
    sgd.step();
  }
  ASSERT_EQ(result.epochs.size(), 1u);
  EXPECT_DOUBLE_EQ(result.epochs[0].train_top1, static_cast<double>(correct) / 40.0);
}

// Records each step's data seconds.
struct DataLog : Callback {
  std::vector<double> data_seconds;
  void on_train_step_end(Trainer&, const StepInfo& info) override { data_seconds.push_back(info.data_seconds); }
};

// Issue 33, G16: time spent in the batch operations (mixup, erasing: issued on the training thread
// once the batch has arrived) is not data wait, which autotune: continuous answers with more loader
// workers that cannot shorten it. Here each batch operation takes 30 ms and the batches are in memory:
// the data wait stays near zero, and the operations' time is reported apart.
TEST(TrainerParts, BatchOperationTimeIsNotCountedAsDataWait) {
  TrainerOptions options;
  options.epochs = 1;
  const data::BatchOp slow_op = [](data::Batch& batch, int64_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    batch.input = batch.input * 1.0;
  };
  auto augmented = std::make_shared<data::AugmentedSource>(memory_source(5, 8, 11), std::vector<data::BatchOp>{slow_op});
  Trainer trainer(options, sgd_parts(net(6)), augmented);
  auto log = std::make_shared<DataLog>();
  trainer.add_callback(log);
  const FitResult result = trainer.fit();
  ASSERT_EQ(result.epochs.size(), 1u);
  const EpochResult& epoch = result.epochs[0];
  EXPECT_LT(epoch.data_wait, 0.25) << "the 30 ms batch operations were counted as waiting for data";
  EXPECT_GE(epoch.stages.batch_ops, 5 * 0.030);
  ASSERT_EQ(log->data_seconds.size(), 5u);
  for (const double s : log->data_seconds) EXPECT_LT(s, 0.015);
}

// Without a loss, schedule, scaler or EMA part: cross-entropy, the optimizer's own learning rate,
// no loss scaling, no EMA.
TEST(TrainerParts, DefaultsAreCrossEntropyAndTheOptimizersLr) {
  TinyNet model = net(4);
  TrainerParts parts;
  parts.model = torch::nn::AnyModule(model);
  parts.optimizer = std::make_unique<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.05));
  Built b = build(std::move(parts));
  EXPECT_DOUBLE_EQ(b.trainer->lr_at(7), 0.05);
  EXPECT_FALSE(b.trainer->scaler().enabled());
  EXPECT_EQ(b.trainer->ema(), nullptr);

  TinyNet plain = net(4);
  torch::optim::SGD sgd(plain->parameters(), torch::optim::SGDOptions(0.05));
  b.train->start_epoch(0, 0);
  const data::Batch batch = *b.train->next();
  const torch::Tensor loss = b.trainer->train_step(batch);
  const torch::Tensor expected = torch::nn::functional::cross_entropy(plain->forward(batch.input), batch.target);
  expected.backward();
  sgd.step();
  EXPECT_NEAR(loss.item<double>(), expected.item<double>(), 1e-6);
  const auto trained = model->parameters(), stepped = plain->parameters();
  for (size_t i = 0; i < trained.size(); ++i) EXPECT_TRUE(torch::allclose(trained[i], stepped[i], 1e-6, 1e-7));
}

// A missing part, an empty source or a model that is not ready is refused when the Trainer is built,
// naming what is wrong and what to do.
TEST(TrainerParts, MissingOrUnreadyPartsAreClearErrors) {
  using stoker::testing::error_of;
  auto parts_for = [](TinyNet model) { return sgd_parts(model); };
  auto source = memory_source(1, 4, 1);

  TrainerParts no_model = parts_for(net(1));
  no_model.model = torch::nn::AnyModule();
  EXPECT_CONTAINS(error_of([&] { Trainer({}, std::move(no_model), source, source); }), "TrainerParts::model is empty");
  TrainerParts no_optimizer = parts_for(net(1));
  no_optimizer.optimizer.reset();
  EXPECT_CONTAINS(error_of([&] { Trainer({}, std::move(no_optimizer), source, source); }),
                  "TrainerParts::optimizer is empty");
  EXPECT_CONTAINS(error_of([&] { Trainer({}, parts_for(net(1)), nullptr, source); }),
                  "the training source is missing");
  // No evaluation source: training runs, epochs carry no test results, evaluate() says why it cannot.
  Trainer no_eval({}, parts_for(net(1)), source);
  const FitResult fit = no_eval.fit();
  ASSERT_FALSE(fit.epochs.empty());
  EXPECT_EQ(fit.epochs.back().test.samples, 0);
  EXPECT_CONTAINS(error_of([&] { no_eval.evaluate(); }), "has no evaluation source");

  TrainerOptions bf16_true;
  bf16_true.precision = Precision::kBf16True;  // the model is still float32
  const std::string dtype = error_of([&] { Trainer(bf16_true, parts_for(net(1)), source, source); });
  EXPECT_CONTAINS(dtype, "parameter 'fc.weight' is Float but precision bf16-true trains BFloat16 parameters");
  EXPECT_CONTAINS(dtype, "stoker::prepare_model");
  TrainerOptions on_gpu;
  on_gpu.device = torch::Device(torch::kCUDA, 0);  // the model is on the CPU
  EXPECT_CONTAINS(error_of([&] { Trainer(on_gpu, parts_for(net(1)), source, source); }),
                  "is on cpu but TrainerOptions::device is cuda:0; move the model there");
}

}  // namespace
}  // namespace stoker
