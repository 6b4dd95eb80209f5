// The tensor collectives (distributed/collectives.h) and ZeRO-1's buckets (ShardedDataParallel,
// distributed/data_parallel.h) over Gloo ranks as threads of this process.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <mutex>

#include "distributed/process_group.h"
#include "distributed/thread_ranks.h"
#include "test_util.h"

namespace stoker {
namespace {

TEST(Collectives, AllReduceAllGatherAndBroadcastOverThreeRanks) {
  testing::run_ranks(3, [](distributed::ProcessGroup& group) {
    auto c = group.collectives();
    const auto r = static_cast<double>(c->rank());
    torch::Tensor a = torch::full({4}, r + 1), b = torch::full({2, 3}, 10 * (r + 1));
    c->all_reduce({a, b});  // two tensors, one collective
    EXPECT_TRUE(torch::equal(a, torch::full({4}, 6.0)));
    EXPECT_TRUE(torch::equal(b, torch::full({2, 3}, 60.0)));
    torch::Tensor m = torch::full({1}, r);
    c->all_reduce({m}, distributed::ReduceOp::kMax);
    EXPECT_EQ(m.item<double>(), 2.0);
    const torch::Tensor gathered = c->all_gather(torch::full({2}, r));
    EXPECT_EQ(gathered.sizes(), (std::vector<int64_t>{3, 2}));
    EXPECT_TRUE(torch::equal(gathered, torch::tensor({0.0, 0.0, 1.0, 1.0, 2.0, 2.0}).view({3, 2})));
    torch::Tensor from_zero = torch::full({3}, r);
    c->broadcast({from_zero});
    EXPECT_TRUE(torch::equal(from_zero, torch::zeros({3})));
  });
}

// A small network with a parameter of each kind: 2-D weights, 1-D biases, a 4-D convolution kernel in
// channels-last memory (its pieces follow its memory order).
struct Net : torch::nn::Module {
  Net() {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(2, 3, 3).padding(1)));
    fc1 = register_module("fc1", torch::nn::Linear(3 * 4 * 4, 7));
    fc2 = register_module("fc2", torch::nn::Linear(7, 5));
    conv->weight.set_data(conv->weight.contiguous(torch::MemoryFormat::ChannelsLast));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return fc2(torch::relu(fc1(torch::relu(conv(x)).flatten(1))));
  }
  torch::nn::Conv2d conv{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

// Buckets of 64 and 256 bytes: parameters in several buckets, each cut between the ranks.
distributed::ProcessGroupOptions small_buckets() {
  distributed::ProcessGroupOptions o;
  o.timeout = std::chrono::seconds(60);
  o.first_bucket_bytes = 64;
  o.bucket_bytes = 256;
  return o;
}

// The gradients one process gets for the whole batch (mean loss), parameter by parameter.
std::vector<torch::Tensor> whole_batch_gradients(Net& net, const torch::Tensor& x) {
  net.zero_grad();
  net.forward(x).square().mean().backward();
  std::vector<torch::Tensor> grads;
  for (const auto& p : net.parameters()) grads.push_back(p.grad().clone());
  return grads;
}

// Each rank's pieces hold the mean gradient of the whole batch (each rank's loss the mean over its
// half), also after an accumulation micro-step; gather_parameters and gather_to_rank0 put the pieces
// back together; small buckets, so that parameters are cut across ranks and buckets.
TEST(ShardedDataParallel, PiecesHoldTheMeanGradientAndGatherBackIntoTheParameters) {
  torch::manual_seed(3);
  const torch::Tensor x = torch::randn({8, 2, 4, 4});
  Net reference;
  std::vector<std::shared_ptr<Net>> nets;
  for (int r = 0; r < 2; ++r) {
    nets.push_back(std::make_shared<Net>());
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < reference.parameters().size(); ++i) {
      nets.back()->parameters()[i].copy_(reference.parameters()[i]);
    }
  }
  const std::vector<torch::Tensor> expected = whole_batch_gradients(reference, x);
  testing::run_ranks(2, [&](distributed::ProcessGroup& group) {
    const int r = static_cast<int>(group.rank());
    Net& net = *nets[static_cast<size_t>(r)];
    auto shards = group.sharded_data_parallel(net);
    const auto& params = shards->parameters();
    EXPECT_TRUE(params[0].is_contiguous(torch::MemoryFormat::ChannelsLast));  // the layout is kept
    // Two micro-batches of two samples per rank: accumulated locally, then reduce-scattered.
    for (int micro = 0; micro < 2; ++micro) {
      const bool sync = micro == 1;
      shards->before_backward(sync);
      (net.forward(x.narrow(0, r * 4 + micro * 2, 2)).square().mean() / 2).backward();
      shards->after_backward(sync);
    }
    int64_t owned = 0;
    for (const auto& piece : shards->pieces()) {
      const torch::Tensor whole = distributed::memory_view(
          expected[static_cast<size_t>(piece.parameter)].contiguous(params[static_cast<size_t>(piece.parameter)].suggest_memory_format()));
      const torch::Tensor want = whole.narrow(0, piece.offset, piece.tensor.numel());
      EXPECT_TRUE(torch::allclose(piece.tensor.grad(), want, 1e-5, 1e-6)) << "parameter " << piece.parameter;
      owned += piece.tensor.numel();
    }
    int64_t all = 0;
    for (const auto& p : params) all += p.numel();
    EXPECT_NEAR(static_cast<double>(owned), all / 2.0, 4.0);  // half each (padding aside)
    // Each rank changes its pieces; the all-gather gives every rank every change.
    {
      torch::NoGradGuard no_grad;
      for (const auto& piece : shards->pieces()) piece.tensor.fill_(static_cast<double>(piece.parameter + 1));
    }
    shards->gather_parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_TRUE(torch::equal(params[i], torch::full_like(params[i], static_cast<double>(i + 1)))) << "parameter " << i;
    }
    // The optimizer's view of a state: a tensor per piece; rank 0 gets each parameter's whole one.
    std::vector<torch::Tensor> values;
    for (const auto& piece : shards->pieces()) values.push_back(piece.tensor.clone() * 2);
    const std::vector<torch::Tensor> whole = shards->gather_to_rank0(values);
    ASSERT_EQ(whole.size(), r == 0 ? params.size() : 0u);
    for (size_t i = 0; i < whole.size(); ++i) {
      EXPECT_TRUE(torch::equal(whole[i], params[i] * 2)) << "parameter " << i;
      EXPECT_EQ(whole[i].strides(), params[i].strides());
    }
  }, nullptr, small_buckets());
}

// libtorch's zero_grad() sets the gradients to none; the next backward must give each rank's pieces
// the reduced gradient again (the parameters' gradients views into the buckets), twice in a row.
// Compared with the whole batch's gradients, never with zero: a ReLU unit that no sample turns on
// has an exactly zero gradient on some CPUs' rounding and not on others'.
TEST(ShardedDataParallel, GradientsSetToNoneAreViewsIntoTheBucketsAgainAtTheNextBackward) {
  torch::manual_seed(5);
  const torch::Tensor x = torch::randn({4, 2, 4, 4});
  Net reference;
  const std::vector<torch::Tensor> expected = whole_batch_gradients(reference, x);
  std::vector<std::shared_ptr<Net>> nets;
  for (int r = 0; r < 2; ++r) {
    nets.push_back(std::make_shared<Net>());
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < reference.parameters().size(); ++i) nets.back()->parameters()[i].copy_(reference.parameters()[i]);
  }
  testing::run_ranks(2, [&](distributed::ProcessGroup& group) {
    const int r = static_cast<int>(group.rank());
    Net& net = *nets[static_cast<size_t>(r)];
    auto shards = group.sharded_data_parallel(net);
    for (int round = 0; round < 2; ++round) {
      SCOPED_TRACE("backward " + std::to_string(round + 1));
      net.zero_grad();  // libtorch: to none
      shards->before_backward(true);
      net.forward(x.narrow(0, r * 2, 2)).square().mean().backward();
      shards->after_backward(true);
      for (const auto& piece : shards->pieces()) {
        ASSERT_TRUE(piece.tensor.grad().defined()) << "parameter " << piece.parameter;
        const auto& param = shards->parameters()[static_cast<size_t>(piece.parameter)];
        const torch::Tensor whole = distributed::memory_view(
            expected[static_cast<size_t>(piece.parameter)].contiguous(param.suggest_memory_format()));
        EXPECT_TRUE(torch::allclose(piece.tensor.grad(), whole.narrow(0, piece.offset, piece.tensor.numel()), 1e-5,
                                    1e-6 * (whole.abs().max().item<double>() + 1e-30)))
            << "parameter " << piece.parameter;
      }
    }
  }, nullptr, small_buckets());
}

}  // namespace
}  // namespace stoker
