// Plain data parallelism (parallel/ddp.cpp) on Gloo ranks as threads of this process: the decisions every
// rank must take together (issue 36, G31: a non-finite loss on one rank only, under a loss scaler and
// train.on_nonfinite: skip) and the numbers the loop logs (the global batch's, not rank 0's).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <vector>

#include "data/tensor_batches.h"
#include "distributed/thread_ranks.h"
#include "parallel/strategy.h"
#include "test_util.h"
#include "trainer/trainer.h"

namespace stoker {
namespace {

constexpr int64_t kBatches = 4, kGlobalBatch = 8;

struct NetImpl : torch::nn::Module {
  NetImpl() : fc(register_module("fc", torch::nn::Linear(16, 3))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc(x.flatten(1)); }
  torch::nn::Linear fc;
};
TORCH_MODULE(Net);

struct Data {
  torch::Tensor inputs, targets;
};
Data data() {
  torch::manual_seed(3);
  const torch::Tensor x = torch::randn({kBatches * kGlobalBatch, 1, 4, 4});
  return {x, x.flatten(1).narrow(1, 0, 3).argmax(1)};
}

// Rank `rank` of `world`'s slice of every global batch, in order.
std::shared_ptr<data::TensorBatches> slices(const Data& d, int64_t rank, int64_t world) {
  const int64_t per = kGlobalBatch / world;
  std::vector<torch::Tensor> x, y;
  for (int64_t b = 0; b < kBatches; ++b) {
    x.push_back(d.inputs.narrow(0, b * kGlobalBatch + rank * per, per));
    y.push_back(d.targets.narrow(0, b * kGlobalBatch + rank * per, per));
  }
  return std::make_shared<data::TensorBatches>(torch::cat(x), torch::cat(y), per, torch::kCPU, /*shuffle=*/false);
}

std::shared_ptr<parallel::Strategy> ddp(distributed::ProcessGroup& group) {
  parallel::StrategyContext context;
  context.group = testing::borrowed(group);
  return parallel::make_strategy("ddp", context);
}

std::vector<Net> nets(int world) {
  std::vector<Net> out;
  for (int r = 0; r < world; ++r) {
    torch::manual_seed(5);
    out.push_back(Net());
  }
  return out;
}

// Cross-entropy, made non-finite at the second batch on rank `poisoned` only: multiplied by NaN (its
// gradients NaN too, on every rank once all-reduced) or added to (its gradients finite).
LossFunction poisoned_loss(int64_t rank, int64_t poisoned, bool nan_gradients) {
  auto calls = std::make_shared<int64_t>(0);
  return [=](const torch::Tensor& logits, const torch::Tensor& target) {
    torch::Tensor loss = torch::nn::functional::cross_entropy(logits, target);
    if (++*calls != 2 || rank != poisoned) return loss;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    return nan_gradients ? loss * nan : loss + nan;
  };
}

struct RankEnd {
  double scale = 0;
  int64_t skipped_by_scaler = 0, skipped_by_watch = 0;
  std::vector<torch::Tensor> weights;
};

// Two DDP ranks with a loss scaler (growth every clean step, so that an update left out shows) and
// train.on_nonfinite: skip; rank 1's loss is non-finite at the second step.
std::vector<RankEnd> train_with_one_poisoned_rank(bool nan_gradients) {
  const Data d = data();
  const std::vector<Net> models = nets(2);
  std::vector<RankEnd> ends(2);
  testing::run_ranks(2, [&](distributed::ProcessGroup& group) {
    const auto rank = static_cast<size_t>(group.rank());
    Net model = models[rank];
    TrainerOptions o;
    o.epochs = 1;
    o.batch_size = kGlobalBatch / 2;
    o.nonfinite.on_nonfinite = OnNonfinite::kSkip;
    TrainerParts p;
    p.model = torch::nn::AnyModule(model);
    p.optimizer = std::make_unique<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.1));
    p.loss = poisoned_loss(group.rank(), 1, nan_gradients);
    p.scaler = std::make_unique<GradScaler>(GradScalerOptions().with_init_scale(1024).with_growth_interval(1),
                                            torch::kCPU);
    p.strategy = ddp(group);
    Trainer trainer(o, std::move(p), slices(d, group.rank(), 2));
    const FitResult result = trainer.fit();
    RankEnd& end = ends[rank];
    end.scale = trainer.scaler().scale_value();
    end.skipped_by_scaler = trainer.scaler().skipped_steps();
    end.skipped_by_watch = result.epochs.at(0).nonfinite_skips;
    for (const auto& w : trainer.module().parameters()) end.weights.push_back(w.detach().clone());
  });
  return ends;
}

void expect_same_on_both_ranks(const std::vector<RankEnd>& ends) {
  EXPECT_EQ(ends[0].scale, ends[1].scale) << "the ranks' loss scales went apart";
  EXPECT_EQ(ends[0].skipped_by_scaler, ends[1].skipped_by_scaler);
  EXPECT_EQ(ends[0].skipped_by_watch, ends[1].skipped_by_watch) << "the ranks took different skip decisions";
  EXPECT_EQ(ends[0].skipped_by_watch, 1) << "the poisoned step is skipped (train.on_nonfinite: skip) on every rank";
  for (size_t i = 0; i < ends[0].weights.size(); ++i) {
    const double scale = ends[0].weights[i].abs().max().item<double>();
    EXPECT_LE((ends[0].weights[i] - ends[1].weights[i]).abs().max().item<double>(), 1e-6 * std::max(1.0, scale))
        << "the ranks' weights went apart (parameter " << i << ")";
  }
  for (const auto& w : ends[0].weights) EXPECT_TRUE(w.isfinite().all().item<bool>());
}

// G31: rank 1 alone sees a non-finite loss. Every rank takes the same skip decision and the same loss-scale
// update, so the replicas stay the same.
TEST(DataParallelDecisions, ANonFiniteLossOnOneRankIsSkippedByEveryRankWithTheSameLossScale) {
  expect_same_on_both_ranks(train_with_one_poisoned_rank(/*nan_gradients=*/true));
}

TEST(DataParallelDecisions, ANonFiniteLossWithFiniteGradientsOnOneRankIsSkippedByEveryRank) {
  expect_same_on_both_ranks(train_with_one_poisoned_rank(/*nan_gradients=*/false));
}

// Each step's logged loss (StepInfo::loss), read on rank 0.
class LossLog : public Callback {
 public:
  void on_train_step_end(Trainer&, const StepInfo& info) override { losses.push_back(info.loss.item<double>()); }
  std::vector<double> losses;
};

struct Logged {
  std::vector<double> losses;
  EpochResult epoch;
};

// `world` DDP ranks (or one process) on the same global batches; rank 0's logged losses and epoch.
Logged train_and_log(int world) {
  const Data d = data();
  const std::vector<Net> models = nets(world);
  Logged out;
  std::mutex mutex;
  const auto body = [&](int64_t rank, std::shared_ptr<parallel::Strategy> strategy) {
    Net model = models[static_cast<size_t>(rank)];
    TrainerOptions o;
    o.epochs = 1;
    o.batch_size = kGlobalBatch / world;
    TrainerParts p;
    p.model = torch::nn::AnyModule(model);
    p.optimizer = std::make_unique<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.5));
    p.strategy = std::move(strategy);
    Trainer trainer(o, std::move(p), slices(d, rank, world));
    auto log = std::make_shared<LossLog>();
    trainer.add_callback(log);
    const FitResult result = trainer.fit();
    std::lock_guard<std::mutex> lock(mutex);
    if (rank == 0) out = {log->losses, result.epochs.at(0)};
  };
  if (world == 1) {
    body(0, nullptr);
  } else {
    testing::run_ranks(world, [&](distributed::ProcessGroup& group) { body(group.rank(), ddp(group)); });
  }
  return out;
}

// The logged step loss and the epoch's training numbers are the global batch's, as one process on the same
// global batches logs them (issue 36: rank 0's own loss differed from step 1).
TEST(DataParallelMetrics, TheLoggedLossAndTheEpochsNumbersAreTheGlobalBatchs) {
  const Logged one = train_and_log(1), two = train_and_log(2);
  ASSERT_EQ(one.losses.size(), static_cast<size_t>(kBatches));
  ASSERT_EQ(two.losses.size(), one.losses.size());
  // A rank's half of the first global batch has a loss of its own, apart from the global one by more than
  // the tolerance below: rank 0 logging its own would fail here.
  {
    torch::NoGradGuard no_grad;
    const Data d = data();
    Net initial = nets(1)[0];
    const torch::Tensor x = d.inputs.narrow(0, 0, kGlobalBatch), y = d.targets.narrow(0, 0, kGlobalBatch);
    const double half = torch::nn::functional::cross_entropy(initial(x.narrow(0, 0, kGlobalBatch / 2)),
                                                             y.narrow(0, 0, kGlobalBatch / 2)).item<double>();
    ASSERT_GT(std::abs(half - one.losses[0]), 1e-3) << "the test's data cannot tell the global loss from rank 0's";
  }
  for (size_t i = 0; i < one.losses.size(); ++i) {
    EXPECT_NEAR(two.losses[i], one.losses[i], 1e-5 * std::max(1.0, std::abs(one.losses[i]))) << "step " << i + 1;
  }
  EXPECT_NEAR(two.epoch.train_loss, one.epoch.train_loss, 1e-5 * std::max(1.0, std::abs(one.epoch.train_loss)));
  EXPECT_DOUBLE_EQ(two.epoch.train_top1, one.epoch.train_top1);  // counts of samples: exact
}

}  // namespace
}  // namespace stoker
