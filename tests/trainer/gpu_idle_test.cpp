// trainer/gpu_idle.h, and the progress line that shows its measurement.
#include "trainer/gpu_idle.h"

#include <chrono>
#include <cstdio>
#include <thread>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "test_util.h"

namespace stoker {
namespace {

TEST(GpuIdle, OffCudaTheMeterIsInactiveAndMeasuresNothing) {
  GpuIdleMeter meter(torch::kCPU);
  EXPECT_FALSE(meter.active());
  meter.new_epoch();
  meter.step_begin();
  meter.step_end();
  EXPECT_FALSE(meter.take_idle_share().has_value());
}

// Steps of GPU work issued back to back leave the GPU busy; the same steps with the host sleeping
// between them (a starved input pipeline) leave it idle for most of the time.
TEST(GpuIdle, HostPausesBetweenStepsAreMeasuredAsIdle) {
  STOKER_NEEDS_CUDA();
  const torch::Device device(torch::kCUDA, 0);
  GpuIdleMeter meter(device);
  ASSERT_TRUE(meter.active());
  const torch::Tensor a = torch::randn({2048, 2048}, device);
  auto step = [&] {
    meter.step_begin();
    for (int i = 0; i < 8; ++i) (void)torch::mm(a, a);
    meter.step_end();
  };
  for (int i = 0; i < 20; ++i) step();
  torch::cuda::synchronize();
  const std::optional<double> busy = meter.take_idle_share();
  ASSERT_TRUE(busy.has_value());
  EXPECT_LT(*busy, 0.1);
  for (int i = 0; i < 10; ++i) {
    torch::cuda::synchronize();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    step();
  }
  torch::cuda::synchronize();
  const std::optional<double> starved = meter.take_idle_share();
  ASSERT_TRUE(starved.has_value());
  EXPECT_GT(*starved, 0.3);
}

}  // namespace
}  // namespace stoker
