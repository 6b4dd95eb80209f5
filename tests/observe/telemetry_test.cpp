// GPU telemetry without a GPU: an absent or wrong NVML library is reported with its reason, the CPU
// gets no sampler, and the sampler thread samples, averages, stops promptly and reports a failing reader.
#include "observe/telemetry.h"

#include <limits>
#include "observe/metrics_file.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "test_util.h"

namespace stoker {
namespace {

TEST(Telemetry, AbsentNvmlLibraryIsUnavailableWithTheReason) {
  std::string why;
  EXPECT_EQ(NvmlDevice::open("0000:00:00.0", &why, "libnvidia-ml-absent.so.1"), nullptr);
  EXPECT_CONTAINS(why, "cannot load libnvidia-ml-absent.so.1");
  EXPECT_CONTAINS(why, "NVIDIA driver");
  // A library that loads but is not NVML: the first missing function is named.
  why.clear();
  EXPECT_EQ(NvmlDevice::open("0000:00:00.0", &why, "libz.so.1"), nullptr);
  EXPECT_CONTAINS(why, "libz.so.1 lacks nvmlInit_v2");
}

TEST(Telemetry, NoSamplerOnTheCpuOrWithoutNvml) {
  std::string why;
  EXPECT_EQ(start_gpu_telemetry(torch::kCPU, {}, &why), nullptr);
  EXPECT_CONTAINS(why, "training on cpu");
  TelemetryOptions absent;
  absent.library = "libnvidia-ml-absent.so.1";
  why.clear();
  EXPECT_EQ(start_gpu_telemetry(torch::Device(torch::kCUDA, 0), absent, &why), nullptr);
  EXPECT_FALSE(why.empty());  // no CUDA device here, no CUDA in the build, or no such library
  EXPECT_TRUE(telemetry_scalars(std::nullopt).empty());
}

GpuSample fake_sample(double n) {
  GpuSample s;
  s.utilization = 10 * n;
  s.memory_used_gib = n;
  s.memory_total_gib = 80;
  s.power_w = 100 + n;
  s.temperature_c = 50;
  s.sm_clock_mhz = 1000 + n;
  return s;
}

TEST(Telemetry, SamplerSamplesAveragesAndStopsPromptly) {
  std::atomic<int> calls{0};
  TelemetrySampler sampler([&] { return fake_sample(++calls); }, 0.005);
  for (int i = 0; i < 400 && sampler.samples_taken() < 4; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_GE(sampler.samples_taken(), 4);
  sampler.stop();
  const int n = calls.load();
  ASSERT_EQ(sampler.samples_taken(), n);
  EXPECT_EQ(sampler.latest()->sm_clock_mhz, 1000 + n);
  const std::optional<GpuSample> mean = sampler.take_mean();  // over samples 1..n
  ASSERT_TRUE(mean);
  EXPECT_DOUBLE_EQ(mean->utilization, 10 * (n + 1) / 2.0);
  EXPECT_DOUBLE_EQ(mean->power_w, 100 + (n + 1) / 2.0);
  EXPECT_DOUBLE_EQ(mean->memory_used_gib, n);  // the largest
  EXPECT_DOUBLE_EQ(mean->memory_total_gib, 80);
  // Nothing new since: the latest sample.
  EXPECT_DOUBLE_EQ(sampler.take_mean()->utilization, 10 * n);
  EXPECT_EQ(sampler.error(), "");
  sampler.stop();  // idempotent

  // A long interval does not delay stopping: the thread waits on a condition variable.
  const auto start = std::chrono::steady_clock::now();
  {
    TelemetrySampler slow([] { return fake_sample(1); }, 3600);
    while (slow.samples_taken() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));

  const std::vector<Scalar> scalars = telemetry_scalars(fake_sample(2));
  ASSERT_EQ(scalars.size(), 5u);
  EXPECT_EQ(scalars[0].tag, "gpu/utilization");
  EXPECT_EQ(scalars[0].value, 20);
  StepRecord record;
  record.telemetry = fake_sample(2);
  EXPECT_CONTAINS(metrics_line(record), "\"gpu_utilization\":20.0,\"gpu_memory_used_gib\":2.0,\"gpu_power_w\":102.0,"
                                        "\"gpu_temperature_c\":50.0,\"gpu_sm_clock_mhz\":1002.0}");
}

// Issue 24, G12: a field NVML answers NOT_SUPPORTED for (MIG, sandboxes) is absent, not fatal: the
// sampler keeps the others, and metrics leave the absent one out.
TEST(Telemetry, AFieldTheGpuDoesNotReportIsLeftOut) {
  GpuSample sample = fake_sample(3);
  sample.utilization = std::numeric_limits<double>::quiet_NaN();
  sample.power_w = std::numeric_limits<double>::quiet_NaN();
  TelemetrySampler sampler([&] { return sample; }, 0.001);
  while (sampler.samples_taken() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const std::optional<GpuSample> mean = sampler.take_mean();
  sampler.stop();
  ASSERT_TRUE(mean.has_value());
  EXPECT_EQ(sampler.error(), "");
  EXPECT_DOUBLE_EQ(mean->temperature_c, sample.temperature_c);
  std::vector<std::string> tags;
  for (const Scalar& s : telemetry_scalars(mean)) tags.push_back(s.tag);
  EXPECT_EQ(tags, (std::vector<std::string>{"gpu/memory_used_gib", "gpu/temperature_c", "gpu/sm_clock_mhz"}));
  StepRecord record;
  record.telemetry = mean;
  const std::string line = metrics_line(record);
  EXPECT_EQ(line.find("gpu_utilization"), std::string::npos) << line;
  EXPECT_EQ(line.find("null"), std::string::npos) << line;
}

TEST(Telemetry, AFailingReaderStopsTheSamplerWithItsError) {
  std::atomic<int> calls{0};
  TelemetrySampler sampler(
      [&]() -> GpuSample {
        if (++calls == 2) throw Error("nvmlDeviceGetPowerUsage failed: GPU is lost");
        return fake_sample(1);
      },
      0.001);
  for (int i = 0; i < 1000 && sampler.error().empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_CONTAINS(sampler.error(), "GPU is lost");
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(calls.load(), 2) << "no reads after the failure";
  EXPECT_EQ(sampler.samples_taken(), 1);
}

}  // namespace
}  // namespace stoker
