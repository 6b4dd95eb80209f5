// CudaGraphStep on its own (trainer/cuda_graph_step.h): off the GPU it never runs the step; on a GPU
// it warms up, captures the step function once and replays it, and a capture that fails gives its
// memory pool back. The Trainer's graphed steps against eager ones are in trainer_test.cpp.
#include "trainer/cuda_graph_step.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "test_util.h"

#ifdef STOKER_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace stoker {
namespace {

// Off the GPU the graph is disabled from the start and run() leaves the step to the caller.
TEST(CudaGraphStep, OnTheCpuItIsDisabledAndNeverRunsTheStep) {
  int calls = 0;
  CudaGraphStep graph(torch::kCPU, [&](const torch::Tensor& x, const torch::Tensor&) {
    ++calls;
    return x.sum();
  }, {});
  EXPECT_TRUE(graph.disabled());
  EXPECT_FALSE(graph.active());
  EXPECT_FALSE(graph.run(torch::ones({4}), torch::zeros({4}, torch::kLong)).has_value());
  EXPECT_EQ(calls, 0);
}

// The decision on a batch of another shape: fewer samples (a short last batch) are stepped eagerly;
// samples of another shape (a new size from data.resolution_schedule) are captured again.
TEST(CudaGraphStep, ShapeDecisionReplaysStepsShortBatchesEagerlyAndRecapturesANewSize) {
  EXPECT_EQ(graph_shape_action({256, 3, 160, 160}, {256, 3, 160, 160}), GraphShapeAction::kReplay);
  EXPECT_EQ(graph_shape_action({256, 3, 160, 160}, {100, 3, 160, 160}), GraphShapeAction::kEager);
  EXPECT_EQ(graph_shape_action({256, 3, 160, 160}, {256, 3, 192, 192}), GraphShapeAction::kRecapture);
  EXPECT_EQ(graph_shape_action({256, 3, 160, 160}, {100, 3, 192, 192}), GraphShapeAction::kRecapture);
  EXPECT_EQ(graph_shape_action({256, 160, 160, 3}, {256, 160, 176, 3}), GraphShapeAction::kRecapture);
  EXPECT_EQ(graph_shape_action({4}, {5}), GraphShapeAction::kEager);
  EXPECT_EQ(graph_shape_action({4, 3}, {4, 3, 1}), GraphShapeAction::kRecapture);
}

#ifdef STOKER_WITH_CUDA

// After a capture at one sample shape, batches of another (a new training size) warm up and capture
// the step again, and are replayed from then on; a short batch of the new size is left to the caller.
TEST(CudaGraphStep, ANewSampleShapeIsCapturedAgain) {
  STOKER_NEEDS_CUDA();
  const torch::Device gpu(torch::kCUDA, 0);
  const auto f32 = torch::TensorOptions().device(gpu);
  int calls = 0;
  CudaGraphStep graph(gpu, [&](const torch::Tensor& x, const torch::Tensor&) {
    ++calls;
    return x.sum();
  }, {}, /*warmup=*/1);
  const torch::Tensor t = torch::zeros({2}, f32.dtype(torch::kLong));
  for (int64_t width : {3, 5}) {
    for (int i = 0; i < 3; ++i) {
      const torch::Tensor x = torch::full({2, width}, static_cast<double>(i + 1), f32);
      const std::optional<torch::Tensor> loss = graph.run(x, t);
      ASSERT_TRUE(loss.has_value()) << "width " << width << ", call " << i;
      EXPECT_FLOAT_EQ(loss->item<float>(), static_cast<float>(2 * width * (i + 1))) << "width " << width;
    }
    EXPECT_TRUE(graph.active());
  }
  EXPECT_EQ(calls, 4);  // a warm-up and a capture at each width
  EXPECT_FALSE(graph.run(torch::ones({1, 5}, f32), torch::zeros({1}, f32.dtype(torch::kLong))).has_value());
}

// One warm-up call runs the step eagerly, the next is captured (the step function runs once more,
// recording) and replayed, every later call only replays: the step's effects follow each batch. A
// batch of another shape is left to the caller.
TEST(CudaGraphStep, CapturesTheStepOnceAndReplaysItOnEachBatch) {
  STOKER_NEEDS_CUDA();
  const torch::Device gpu(torch::kCUDA, 0);
  const auto f32 = torch::TensorOptions().device(gpu);
  torch::Tensor sum = torch::zeros({4}, f32);  // state the step updates in place, as an optimizer does
  int calls = 0;
  CudaGraphStep graph(gpu, [&](const torch::Tensor& x, const torch::Tensor& t) {
    ++calls;
    sum.add_(x * 2);
    return (x * t.to(torch::kFloat32)).sum();
  }, {}, /*warmup=*/1);
  const torch::Tensor t = torch::full({4}, 3, f32.dtype(torch::kLong));
  torch::Tensor expected = torch::zeros({4}, f32);
  for (int i = 0; i < 4; ++i) {
    const torch::Tensor x = torch::arange(4, f32) + i;
    const std::optional<torch::Tensor> loss = graph.run(x, t);
    ASSERT_TRUE(loss.has_value()) << "call " << i;
    expected += x * 2;
    EXPECT_FLOAT_EQ(loss->item<float>(), (x * 3).sum().item<float>()) << "call " << i;
    EXPECT_TRUE(torch::equal(sum, expected)) << "call " << i;
  }
  EXPECT_EQ(calls, 2);  // the warm-up and the capture
  EXPECT_TRUE(graph.active());
  EXPECT_FALSE(graph.run(torch::ones({5}, f32), torch::zeros({5}, f32.dtype(torch::kLong))).has_value());
}

// A capture that fails (here: a host synchronisation inside the step) disables the graph and gives
// the graph's private memory pool back to the caching allocator (issue #12): what the step
// allocated during the capture is returned by empty_cache, not kept for a graph that never was.
TEST(CudaGraphStep, AFailedCaptureGivesItsMemoryPoolBack) {
  STOKER_NEEDS_CUDA();
  namespace allocator = c10::cuda::CUDACachingAllocator;
  const torch::Device gpu(torch::kCUDA, 0);
  const auto reserved = [] {
    const size_t aggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    return allocator::getDeviceStats(0).reserved_bytes[aggregate].current;
  };
  int calls = 0;
  bool failure_hook = false;
  CudaGraphStep::Hooks hooks;
  hooks.after_failure = [&] { failure_hook = true; };
  CudaGraphStep graph(gpu, [&](const torch::Tensor& x, const torch::Tensor&) {
    ++calls;
    const torch::Tensor big = torch::ones({int64_t{256} << 20}, x.options().dtype(torch::kUInt8));  // 256 MiB
    (void)big.sum().item<int64_t>();  // not capturable: the capture fails here
    return x.sum();
  }, hooks, /*warmup=*/0);
  const torch::Tensor x = torch::ones({4}, torch::TensorOptions().device(gpu));
  const torch::Tensor t = torch::zeros({4}, torch::TensorOptions().device(gpu).dtype(torch::kLong));
  torch::cuda::synchronize();
  allocator::emptyCache();
  const int64_t before = reserved();
  EXPECT_FALSE(graph.run(x, t).has_value());
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(graph.disabled());
  EXPECT_FALSE(graph.active());
  EXPECT_TRUE(failure_hook);
  allocator::emptyCache();
  EXPECT_LT(reserved() - before, int64_t{64} << 20) << "the failed capture's memory pool is still reserved";
  // The stream and the allocator work as before: eager work on the device goes on.
  EXPECT_FLOAT_EQ((x * 2).sum().item<float>(), 8.0f);
}

#endif  // STOKER_WITH_CUDA

}  // namespace
}  // namespace stoker
