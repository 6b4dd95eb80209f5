// SyncBatchNorm and the evaluation's BatchNorm statistics (parallel/sync_batchnorm.h) against plain
// BatchNorm on all ranks' samples at once, with Gloo ranks as threads of this process.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "distributed/thread_ranks.h"
#include "models/batch_norm.h"
#include "models/compact_resnet.h"
#include "models/registry.h"
#include "test_util.h"
#include "parallel/sync_batchnorm.h"

#ifdef STOKER_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace stoker {
namespace {

struct Reference {
  torch::Tensor output, input_grad, weight_grad, bias_grad, running_mean, running_var;
};

// Plain BatchNorm on the whole batch, twice (the running statistics move twice), the loss a weighted sum.
Reference plain(const torch::Tensor& x, const torch::Tensor& upstream, int64_t channels) {
  models::BatchNorm2d bn(channels);
  torch::Tensor input = x.clone().requires_grad_(true);
  bn->forward(input.detach());
  torch::Tensor y = bn->forward(input);
  (y * upstream).sum().backward();
  return {y.detach(), input.grad(), bn->weight.grad(), bn->bias.grad(), bn->running_mean.clone(), bn->running_var.clone()};
}

// Ranks with uneven batches (`sizes` samples each): their outputs and input gradients are the slices
// of plain BatchNorm's on the whole batch, their weight and bias gradients add up to its, and every
// rank's running statistics are its.
void expect_like_plain_batchnorm(const std::vector<int64_t>& sizes) {
  torch::manual_seed(7);
  const int64_t channels = 3, total = [&] { int64_t n = 0; for (int64_t s : sizes) n += s; return n; }();
  const torch::Tensor x = torch::randn({total, channels, 5, 4}) * 3 + 1;
  const torch::Tensor upstream = torch::randn({total, channels, 5, 4});
  const Reference want = plain(x, upstream, channels);
  const auto world = static_cast<int>(sizes.size());
  std::vector<torch::Tensor> weight_grads(sizes.size()), bias_grads(sizes.size());
  testing::run_ranks(world, [&](distributed::ProcessGroup& group) {
    const auto r = static_cast<size_t>(group.rank());
    int64_t start = 0;
    for (size_t i = 0; i < r; ++i) start += sizes[i];
    models::BatchNorm2d bn(channels);
    ASSERT_EQ(parallel::convert_sync_batchnorm(*bn, group.collectives()), 1);
    torch::Tensor input = x.narrow(0, start, sizes[r]).clone().requires_grad_(true);
    bn->forward(input.detach());
    torch::Tensor y = bn->forward(input);
    (y * upstream.narrow(0, start, sizes[r])).sum().backward();
    EXPECT_TRUE(torch::allclose(y, want.output.narrow(0, start, sizes[r]), 1e-5, 1e-5)) << "rank " << r;
    EXPECT_TRUE(torch::allclose(input.grad(), want.input_grad.narrow(0, start, sizes[r]), 1e-5, 1e-5)) << "rank " << r;
    EXPECT_TRUE(torch::allclose(bn->running_mean, want.running_mean, 1e-6, 1e-6)) << "rank " << r;
    EXPECT_TRUE(torch::allclose(bn->running_var, want.running_var, 1e-6, 1e-6)) << "rank " << r;
    EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 2);
    weight_grads[r] = bn->weight.grad().clone();
    bias_grads[r] = bn->bias.grad().clone();
    bn->eval();  // evaluation: the running statistics, no collective
    EXPECT_TRUE(torch::allclose(bn->forward(x.narrow(0, 0, 2)), (x.narrow(0, 0, 2) - want.running_mean.view({1, 3, 1, 1})) /
                                (want.running_var.view({1, 3, 1, 1}) + 1e-5).sqrt(), 1e-4, 1e-5));
  });
  EXPECT_TRUE(torch::allclose(torch::stack(weight_grads).sum(0), want.weight_grad, 1e-4, 1e-5));
  EXPECT_TRUE(torch::allclose(torch::stack(bias_grads).sum(0), want.bias_grad, 1e-4, 1e-5));
}

TEST(SyncBatchNorm, TwoRanksAreBatchNormOverBothBatches) { expect_like_plain_batchnorm({6, 6}); }

TEST(SyncBatchNorm, UnevenBatchesOnThreeRanksAreWeighedByTheirCounts) { expect_like_plain_batchnorm({5, 2, 1}); }

// One process: plain BatchNorm, bit for bit (a group of one attaches, and gives back torch's forward).
TEST(SyncBatchNorm, OneRankIsPlainBatchNormBitForBit) {
  torch::manual_seed(1);
  const torch::Tensor x = torch::randn({4, 16, 8, 8});
  testing::run_ranks(1, [&](distributed::ProcessGroup& group) {
    torch::manual_seed(2);
    auto synced = models::CompactResNet(dynamic_cast<const models::CompactResNetOptions&>(
                                            models::model_options("compact_resnet").options()),
                                        models::ModelShape{16, 10});
    torch::manual_seed(2);
    auto plain_model = models::CompactResNet(dynamic_cast<const models::CompactResNetOptions&>(
                                                 models::model_options("compact_resnet").options()),
                                             models::ModelShape{16, 10});
    EXPECT_GT(parallel::convert_sync_batchnorm(*synced, group.collectives()), 0);
    synced->forward(x).sum().backward();
    plain_model->forward(x).sum().backward();
    for (size_t i = 0; i < synced->parameters().size(); ++i) {
      EXPECT_TRUE(torch::equal(synced->parameters()[i].grad(), plain_model->parameters()[i].grad())) << i;
    }
    for (size_t i = 0; i < synced->buffers().size(); ++i) {
      EXPECT_TRUE(torch::equal(synced->buffers()[i], plain_model->buffers()[i])) << i;
    }
  });
}

// momentum: none (a cumulative average of every batch's statistics) through the synchronised path, as
// torch's BatchNorm moves it (the factor 1 / batches seen, now computed on the device).
TEST(SyncBatchNorm, ACumulativeAverageMovesTheRunningStatisticsAsTorchDoes) {
  torch::manual_seed(5);
  const torch::Tensor x = torch::randn({3, 8, 4, 6, 6}) * 2 + 1;
  testing::run_ranks(1, [&](distributed::ProcessGroup& group) {
    const auto options = torch::nn::BatchNormOptions(4).momentum(std::nullopt);
    models::BatchNorm2d synced(options), plain(options);
    auto collectives = group.collectives();
    for (int64_t i = 0; i < 3; ++i) {
      parallel::sync_batch_norm(*synced, x[i], *collectives);
      plain->forward(x[i]);
    }
    EXPECT_TRUE(torch::allclose(synced->running_mean, plain->running_mean, 1e-5, 1e-6));
    EXPECT_TRUE(torch::allclose(synced->running_var, plain->running_var, 1e-5, 1e-6));
  });
}

TEST(SyncBatchNorm, APlainTorchBatchNormIsRefusedByName) {
  testing::run_ranks(1, [](distributed::ProcessGroup& group) {
    torch::nn::Sequential net(torch::nn::Conv2d(3, 4, 1), torch::nn::BatchNorm2d(4));
    EXPECT_CONTAINS(testing::error_of([&] { parallel::convert_sync_batchnorm(*net, group.collectives()); }),
                    "distributed.sync_batchnorm: the model's module(s) '1' are torch::nn::BatchNorm");
  });
}

// distributed.eval_bn: reduce: every rank ends with the mean of the ranks' running statistics.
TEST(SyncBatchNorm, EvalBnReduceAveragesTheRunningStatistics) {
  testing::run_ranks(2, [](distributed::ProcessGroup& group) {
    torch::nn::Sequential net(models::BatchNorm2d(2));
    auto* bn = net[0]->as<torch::nn::BatchNorm2d>();
    bn->running_mean.fill_(static_cast<double>(group.rank()) * 2);  // 0 and 2
    bn->running_var.fill_(static_cast<double>(group.rank()) + 1);   // 1 and 2
    bn->num_batches_tracked.fill_(5);
    parallel::average_batchnorm_statistics(*net, *group.collectives());
    EXPECT_TRUE(torch::equal(bn->running_mean, torch::full({2}, 1.0)));
    EXPECT_TRUE(torch::equal(bn->running_var, torch::full({2}, 1.5)));
    EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 5);
  });
}

}  // namespace
}  // namespace stoker

namespace stoker {
namespace {

// On a GPU, NCCL: the synchronised path itself (sync_batch_norm, which a group of one does not skip) on
// CUDA tensors against torch's BatchNorm; with two GPUs, two NCCL ranks against the whole batch.
TEST(SyncBatchNormGpu, TheNcclPathIsBatchNormOnCudaTensors) {
  STOKER_NEEDS_CUDA();
  const torch::Device gpu(torch::kCUDA, 0);
  torch::manual_seed(3);
  const torch::Tensor x = (torch::randn({8, 4, 6, 6}) * 2 + 1).to(gpu);
  testing::run_ranks(1, [&](distributed::ProcessGroup& group) {
    EXPECT_EQ(group.backend(), "nccl");
    models::BatchNorm2d synced(4), plain(4);
    synced->to(gpu);
    plain->to(gpu);
    torch::Tensor a = x.clone().requires_grad_(true), b = x.clone().requires_grad_(true);
    torch::Tensor ya = parallel::sync_batch_norm(*synced, a, *group.collectives());
    torch::Tensor yb = plain->forward(b);
    (ya * ya).sum().backward();
    (yb * yb).sum().backward();
    EXPECT_TRUE(torch::allclose(ya, yb, 1e-4, 1e-5));
    EXPECT_TRUE(torch::allclose(a.grad(), b.grad(), 1e-4, 1e-5));
    EXPECT_TRUE(torch::allclose(synced->weight.grad(), plain->weight.grad(), 1e-4, 1e-5));
    EXPECT_TRUE(torch::allclose(synced->running_var, plain->running_var, 1e-5, 1e-6));
  }, [&](int) { return gpu; });
}

// A cumulative average (momentum: none) on a GPU reads nothing from the host in the forward (issue 41:
// it read the batch count every forward, which waits for the device): under PyTorch's sync debug mode
// at the error level, three forwards run through, and the running statistics are torch's.
TEST(SyncBatchNormGpu, ACumulativeAverageWaitsForNothingOnTheHost) {
  STOKER_NEEDS_CUDA_KERNELS();
#ifdef STOKER_WITH_CUDA
  const torch::Device gpu(torch::kCUDA, 0);
  torch::manual_seed(5);
  const torch::Tensor x = (torch::randn({3, 8, 4, 6, 6}) * 2 + 1).to(gpu);
  testing::run_ranks(1, [&](distributed::ProcessGroup& group) {
    const auto options = torch::nn::BatchNormOptions(4).momentum(std::nullopt);
    models::BatchNorm2d synced(options), plain(options);
    synced->to(gpu);
    plain->to(gpu);
    auto collectives = group.collectives();
    parallel::sync_batch_norm(*synced, x[0], *collectives);  // the first: NCCL's and cuDNN's set-up
    plain->forward(x[0]);
    auto& state = c10::cuda::warning_state();
    state.set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
    std::string error;
    try {
      for (int64_t i = 1; i < 3; ++i) parallel::sync_batch_norm(*synced, x[i], *collectives);
    } catch (const std::exception& e) {
      error = e.what();
    }
    state.set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
    EXPECT_EQ(error, "") << "a forward waited for the device";
    for (int64_t i = 1; i < 3; ++i) plain->forward(x[i]);
    EXPECT_TRUE(torch::allclose(synced->running_mean, plain->running_mean, 1e-4, 1e-5));
    EXPECT_TRUE(torch::allclose(synced->running_var, plain->running_var, 1e-4, 1e-5));
  }, [&](int) { return gpu; });
#endif
}

TEST(SyncBatchNormGpu, TwoNcclRanksAreBatchNormOverBothBatches) {
  STOKER_NEEDS_CUDA();
  STOKER_NEEDS_CUDA_DEVICES(2);
  torch::manual_seed(7);
  const torch::Tensor x = torch::randn({8, 3, 5, 4});
  models::BatchNorm2d whole(3);
  const torch::Tensor want = whole->forward(x);
  testing::run_ranks(2, [&](distributed::ProcessGroup& group) {
    const torch::Device gpu(torch::kCUDA, static_cast<c10::DeviceIndex>(group.rank()));
    models::BatchNorm2d bn(3);
    bn->to(gpu);
    parallel::convert_sync_batchnorm(*bn, group.collectives());
    const torch::Tensor y = bn->forward(x.narrow(0, group.rank() * 4, 4).to(gpu)).cpu();
    EXPECT_TRUE(torch::allclose(y, want.narrow(0, group.rank() * 4, 4), 1e-4, 1e-5));
    EXPECT_TRUE(torch::allclose(bn->running_mean.cpu(), whole->running_mean, 1e-5, 1e-6));
  }, [](int r) { return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(r)); });
}

}  // namespace
}  // namespace stoker
