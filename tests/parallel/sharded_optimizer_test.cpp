// ZeRO-1 (distributed.strategy: zero1, parallel/zero1.cpp and parallel/sharded_optimizer.h) against one process with the whole batch: Trainers on Gloo ranks
// as threads of this process, SGD, AdamW and LAMB with gradient clipping and loss scaling; the state
// each rank keeps; checkpoints gathered on rank 0 and resumed on another number of ranks, or alone.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "data/tensor_batches.h"
#include "distributed/thread_ranks.h"
#include "optim/lamb.h"
#include "test_util.h"
#include "parallel/sharded_optimizer.h"
#include "parallel/strategy.h"
#include "trainer/trainer.h"

namespace stoker {
namespace {

constexpr int64_t kBatches = 6, kGlobalBatch = 12;

// A small convolutional network: 4-D, 2-D and 1-D parameters, no batch norm (so that any split of a
// batch has the gradient of the whole).
struct NetImpl : torch::nn::Module {
  NetImpl() {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3).padding(1)));
    fc = register_module("fc", torch::nn::Linear(4 * 4 * 4, 3));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc(torch::relu(conv(x)).flatten(1)); }
  torch::nn::Conv2d conv{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Net);

Net net() {
  torch::manual_seed(5);
  return Net();
}

struct Data {
  torch::Tensor inputs, targets;
};
Data data() {
  torch::manual_seed(9);
  const torch::Tensor x = torch::randn({kBatches * kGlobalBatch, 1, 4, 4});
  return {x, x.flatten(1).narrow(1, 0, 3).argmax(1)};
}

// Rank `rank` of `world`'s slice of every global batch, in order.
std::shared_ptr<data::TensorBatches> slices(const Data& d, int64_t rank, int64_t world,
                                            torch::Device device = torch::kCPU) {
  const int64_t per = kGlobalBatch / world;
  std::vector<torch::Tensor> x, y;
  for (int64_t b = 0; b < kBatches; ++b) {
    x.push_back(d.inputs.narrow(0, b * kGlobalBatch + rank * per, per));
    y.push_back(d.targets.narrow(0, b * kGlobalBatch + rank * per, per));
  }
  return std::make_shared<data::TensorBatches>(torch::cat(x), torch::cat(y), per, device, /*shuffle=*/false);
}

OptimizerOptions optimizer(const std::string& type) {
  OptimizerOptions o;
  o.algorithm = TypedOptions(type, optimizer_registry().get(type).options());
  o.lr = type == "sgd" ? 0.1 : 0.01;
  o.weight_decay = 0.05;
  o.implementation = "foreach";
  return o;
}

TrainerOptions options(int64_t epochs, int64_t batch, torch::Device device = torch::kCPU) {
  TrainerOptions o;
  o.device = device;
  o.epochs = epochs;
  o.batch_size = batch;
  o.grad_clip_norm = 0.5;  // active: the gradients' norm is above it at the start
  return o;
}

// The Trainer's parts: loss scaling on (fp32: the scaler multiplies and divides by its scale).
TrainerParts parts(Net model, std::unique_ptr<torch::optim::Optimizer> opt, torch::Device device = torch::kCPU) {
  TrainerParts p;
  p.model = torch::nn::AnyModule(model);
  p.optimizer = std::move(opt);
  p.scaler = std::make_unique<GradScaler>(GradScalerOptions().with_init_scale(1024), device);
  return p;
}

std::vector<torch::Tensor> weights(Trainer& t) {
  std::vector<torch::Tensor> out;
  for (const auto& p : t.module().parameters()) out.push_back(p.detach().cpu().clone());
  return out;
}

double max_difference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
  return worst;
}

// One process, the whole batch: `epochs` epochs, optionally resumed from / saved to a checkpoint.
std::unique_ptr<Trainer> alone(const std::string& type, int64_t epochs) {
  Net model = net();
  auto opt = make_optimizer(optimizer(type), *model, torch::kCPU);
  auto trainer = std::make_unique<Trainer>(options(epochs, kGlobalBatch), parts(model, std::move(opt)), slices(data(), 0, 1));
  return trainer;
}

// The models of `world` ranks, made before their threads start (they share the random generator).
std::vector<Net> nets(int world) {
  std::vector<Net> out;
  for (int r = 0; r < world; ++r) out.push_back(net());
  return out;
}

// distributed.strategy: zero1 over `group` for `options` (the Trainer sets it up: the optimizer sharded).
std::shared_ptr<parallel::Strategy> zero1(distributed::ProcessGroup& group, const OptimizerOptions& options,
                                          torch::Device device = torch::kCPU) {
  parallel::StrategyContext context;
  context.group = testing::borrowed(group);
  context.optimizer = options;
  context.device = device;
  return parallel::make_strategy("zero1", context);
}

// Rank `group.rank()`'s sharded Trainer over its model.
std::unique_ptr<Trainer> sharded(distributed::ProcessGroup& group, const std::string& type, int64_t epochs,
                                 const Data& d, Net model) {
  TrainerParts p = parts(model, make_optimizer(optimizer(type), *model, torch::kCPU));
  p.strategy = zero1(group, optimizer(type));
  const int64_t world = group.world_size();
  return std::make_unique<Trainer>(options(epochs, kGlobalBatch / world), std::move(p),
                                   slices(d, group.rank(), world));
}

class ShardedOptimizerTest : public ::testing::TestWithParam<std::string> {};

// Two ranks, each stepping half of the parameters, end where one process ends (float32 sums in another
// order: 1e-6), and each keeps about half of the optimizer state.
TEST_P(ShardedOptimizerTest, TwoRanksMatchOneProcessAndKeepHalfTheState) {
  const std::string type = GetParam();
  auto reference = alone(type, 1);
  reference->fit();
  const std::vector<torch::Tensor> want = weights(*reference);
  std::vector<torch::Tensor> initial;
  for (const auto& p : net()->parameters()) initial.push_back(p.detach().clone());
  ASSERT_GT(max_difference(want, initial), 1e-3) << "the steps changed nothing: nothing to compare";
  const int64_t whole_state = parallel::optimizer_state_bytes(reference->optimizer());
  const Data d = data();
  const std::vector<Net> models = nets(2);
  testing::run_ranks(2, [&](distributed::ProcessGroup& group) {
    auto trainer = sharded(group, type, 1, d, models[static_cast<size_t>(group.rank())]);
    trainer->fit();
    EXPECT_LT(max_difference(weights(*trainer), want), 1e-6) << type << ", rank " << group.rank();
    const int64_t mine = parallel::optimizer_state_bytes(trainer->optimizer());
    EXPECT_NEAR(static_cast<double>(mine), whole_state / 2.0, whole_state * 0.02) << type;
  });
}

// A checkpoint of two sharded ranks holds the whole state, as one process writes it: resumed alone or
// on three sharded ranks, training goes on to where an uninterrupted process ends.
TEST_P(ShardedOptimizerTest, ACheckpointOfTwoRanksResumesAloneOrOnThreeRanks) {
  const std::string type = GetParam();
  testing::TempDir dir;
  const auto file = dir / "two.pt";
  auto reference = alone(type, 2);
  reference->fit();
  const std::vector<torch::Tensor> want = weights(*reference);
  const Data d = data();
  const std::vector<Net> two = nets(2), three = nets(3);
  testing::run_ranks(2, [&](distributed::ProcessGroup& group) {
    auto trainer = sharded(group, type, 1, d, two[static_cast<size_t>(group.rank())]);
    trainer->fit();
    trainer->save_checkpoint(group.rank() == 0 ? file : std::filesystem::path());  // every rank, rank 0 writes
  });
  auto resumed = alone(type, 2);
  resumed->load_checkpoint(file);
  resumed->fit();
  EXPECT_LT(max_difference(weights(*resumed), want), 1e-6) << type << ", resumed alone";
  testing::run_ranks(3, [&](distributed::ProcessGroup& group) {
    auto trainer = sharded(group, type, 2, d, three[static_cast<size_t>(group.rank())]);
    trainer->load_checkpoint(file);
    trainer->fit();
    EXPECT_LT(max_difference(weights(*trainer), want), 1e-6) << type << ", resumed on 3 ranks, rank " << group.rank();
  });
}

INSTANTIATE_TEST_SUITE_P(Optimizers, ShardedOptimizerTest, ::testing::Values("sgd", "adamw", "lamb"));

TEST(ShardedOptimizer, AnOptimizerThatCannotBeShardedIsRefusedNamingTheKeys) {
  if (!optimizer_registry().contains("test_plain_sgd")) {
    OptimizerType plain = optimizer_registry().get("sgd");
    plain.shardable = false;
    optimizer_registry().add("test_plain_sgd", plain);
  }
  testing::run_ranks(1, [](distributed::ProcessGroup& group) {
    Net model = net();
    auto shards = group.sharded_data_parallel(*model);
    EXPECT_CONTAINS(testing::error_of([&] { parallel::make_sharded_optimizer(optimizer("test_plain_sgd"), model.ptr(), shards, torch::kCPU); }),
                    "distributed.shard_optimizer: optimizer.type test_plain_sgd cannot be sharded");
  });
}

}  // namespace
}  // namespace stoker

namespace stoker {
namespace {

// On a GPU, NCCL: ZeRO-1's buckets (reduce-scatter, all-gather) and the fused AdamW kernel on the pieces
// against the plain fused optimizer: a group of one on one GPU, two ranks with two GPUs.
TEST(ShardedOptimizerGpu, NcclBucketsAndFusedKernelsMatchThePlainOptimizer) {
  STOKER_NEEDS_CUDA();
  const torch::Device gpu(torch::kCUDA, 0);
  OptimizerOptions adamw = optimizer("adamw");
  adamw.implementation = "fused";
  const Data d = data();
  Net reference_model = net();
  reference_model->to(gpu);
  Trainer reference(options(1, kGlobalBatch, gpu), parts(reference_model, make_optimizer(adamw, *reference_model, gpu), gpu),
                    slices(d, 0, 1, gpu));
  reference.fit();
  const std::vector<torch::Tensor> want = weights(reference);
  const int world = torch::cuda::device_count() >= 2 ? 2 : 1;
  const std::vector<Net> models = nets(world);
  const auto device_of = [](int r) { return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(r)); };
  testing::run_ranks(world, [&](distributed::ProcessGroup& group) {
    EXPECT_EQ(group.backend(), "nccl");
    const torch::Device mine = device_of(static_cast<int>(group.rank()));
    Net model = models[static_cast<size_t>(group.rank())];
    model->to(mine);
    TrainerParts q = parts(model, make_optimizer(adamw, *model, mine), mine);
    q.strategy = zero1(group, adamw, mine);
    Trainer trainer(options(1, kGlobalBatch / world, mine), std::move(q), slices(d, group.rank(), world, mine));
    trainer.fit();
    EXPECT_LT(max_difference(weights(trainer), want), 1e-5) << "rank " << group.rank();
  }, device_of);
}

}  // namespace
}  // namespace stoker
