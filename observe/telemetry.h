// Accelerator telemetry: GPU utilisation, memory, power, temperature and SM clock from NVML,
// sampled on a background thread, for metrics.jsonl, TensorBoard and the run report.
// - NvmlDevice: libnvidia-ml.so.1 loaded with dlopen (no build-time header) and one GPU in it.
// - cuda_pci_bus_id: which GPU that is for a CUDA device index (CUDA_VISIBLE_DEVICES renumbers
//   devices; the PCI bus id does not change).
// - TelemetrySampler: calls a reader every interval on its own thread; latest sample and the mean
//   since the last logging step.
// - start_gpu_telemetry: all of the above for the training device, or one info line saying why not.
//
//   auto telemetry = stoker::start_gpu_telemetry(device, {});      // nullptr: unavailable (logged)
//   if (telemetry) options.set_telemetry([&] { return telemetry->take_mean(); });   // observe/metrics.h
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <torch/torch.h>


namespace stoker {

// One reading of one GPU. A field the GPU does not report (NVML_ERROR_NOT_SUPPORTED: utilisation and
// power on MIG instances, some sandboxes) is NaN and left out of metrics; the others are still read.
struct GpuSample {
  double utilization = 0;       // % of the last sample period (1/6 s to 1 s) in which a kernel ran
  double memory_used_gib = 0;   // device memory in use, by every process
  double memory_total_gib = 0;
  double power_w = 0;           // board power draw
  double temperature_c = 0;     // GPU core temperature
  double sm_clock_mhz = 0;      // current SM clock
};

// The loaded NVML library and one device in it. Thread-compatible: one sampler thread uses it.
class NvmlDevice {
 public:
  // Loads `library`, initialises NVML and finds the GPU with `pci_bus_id` ("0000:3B:00.0", as
  // cudaDeviceGetPCIBusId gives it). nullptr, with `why` saying what failed, when any step fails.
  static std::unique_ptr<NvmlDevice> open(const std::string& pci_bus_id, std::string* why,
                                          const std::string& library = "libnvidia-ml.so.1");
  ~NvmlDevice();  // nvmlShutdown, dlclose
  NvmlDevice(const NvmlDevice&) = delete;
  NvmlDevice& operator=(const NvmlDevice&) = delete;

  // Reads every field; a failing NVML call is a stoker::Error naming the call and NVML's message.
  GpuSample sample() const;

  struct Api;  // the function pointers (telemetry.cpp)

 private:
  NvmlDevice(void* handle, std::unique_ptr<Api> api, void* device);
  void* handle_;
  std::unique_ptr<Api> api_;
  void* device_;  // nvmlDevice_t
};

// The PCI bus id of CUDA device `index` from the CUDA runtime; empty, with `why`, in a build
// without CUDA or when the runtime cannot say.
std::string cuda_pci_bus_id(int index, std::string* why);

// Calls `read` every `interval_s` seconds on a background thread (the first time at once).
// A reader that throws stops the sampling with one warning; error() then says why.
class TelemetrySampler {
 public:
  TelemetrySampler(std::function<GpuSample()> read, double interval_s);
  ~TelemetrySampler();  // stop()
  TelemetrySampler(const TelemetrySampler&) = delete;
  TelemetrySampler& operator=(const TelemetrySampler&) = delete;

  std::optional<GpuSample> latest() const;
  // The mean of the samples taken since the last call (memory: the largest), or the latest sample
  // when none was taken since; nullopt before the first.
  std::optional<GpuSample> take_mean();
  int64_t samples_taken() const { return taken_.load(); }
  std::string error() const;
  void stop();  // wakes and joins the thread; idempotent

 private:
  void run();
  std::function<GpuSample()> read_;
  std::chrono::duration<double> interval_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::optional<GpuSample> latest_;
  GpuSample sum_;  // since the last take_mean (memory: max)
  int64_t in_sum_ = 0;
  std::atomic<int64_t> taken_{0};
  std::string error_;
  std::thread thread_;
};

// The config keys logging.telemetry and logging.telemetry_interval_s.
struct TelemetryOptions {
  double interval_s = 1.0;
  std::string library = "libnvidia-ml.so.1";
};

// Starts sampling the GPU behind `device`; nullptr after one info line saying why there is no
// telemetry (the CPU, a build without CUDA, no NVML library, no such GPU in NVML), also put in `why`.
std::unique_ptr<TelemetrySampler> start_gpu_telemetry(const torch::Device& device, const TelemetryOptions& options,
                                                      std::string* why = nullptr);

}  // namespace stoker
