// Accelerator telemetry: NVML through dlopen, the CUDA device's PCI bus id, the sampler thread.
#include "observe/telemetry.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "common/log.h"

#ifdef STOKER_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace stoker {

// ---- NVML -------------------------------------------------------------------------------------------
// Declared by hand from NVML's documented C ABI (nvml.h of the CUDA toolkit / PyPI's nvidia-nvml-dev;
// https://docs.nvidia.com/deploy/nvml-api/), so that the build needs no NVML header and the program
// runs where the driver's libnvidia-ml.so.1 is missing. Only these calls and structs are used; they
// have kept this ABI since NVML's _v2 entry points (CUDA 5.5).

namespace {

using nvmlReturn_t = int;        // enum; NVML_SUCCESS = 0
using nvmlDevice_t = void*;      // struct nvmlDevice_st*
struct nvmlUtilization_t {
  unsigned int gpu, memory;      // percent
};
struct nvmlMemory_t {
  unsigned long long total, free, used;  // bytes (the v1 struct nvmlDeviceGetMemoryInfo fills)
};
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr nvmlReturn_t kNvmlNotSupported = 3;  // NVML_ERROR_NOT_SUPPORTED (MIG instances, some sandboxes)
constexpr int kNvmlTemperatureGpu = 0;  // nvmlTemperatureSensors_t NVML_TEMPERATURE_GPU
constexpr int kNvmlClockSm = 1;         // nvmlClockType_t NVML_CLOCK_SM

}  // namespace

struct NvmlDevice::Api {
  nvmlReturn_t (*init)();
  nvmlReturn_t (*shutdown)();
  const char* (*error_string)(nvmlReturn_t);
  nvmlReturn_t (*by_pci_bus_id)(const char*, nvmlDevice_t*);
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*);
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*);
  nvmlReturn_t (*power)(nvmlDevice_t, unsigned int*);              // milliwatts
  nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned int*);   // degrees C
  nvmlReturn_t (*clock)(nvmlDevice_t, int, unsigned int*);         // MHz

  std::string message(nvmlReturn_t code) const {
    return fmt::format("{} (NVML error {})", error_string ? error_string(code) : "?", code);
  }
};

namespace {

// Looks up every symbol; the first missing one is the reason.
bool load_api(void* handle, NvmlDevice::Api& api, std::string* missing) {
  const auto find = [&](auto& fn, const char* name) {
    if (!missing->empty()) return;
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
    if (fn == nullptr) *missing = name;
  };
  find(api.init, "nvmlInit_v2");
  find(api.shutdown, "nvmlShutdown");
  find(api.error_string, "nvmlErrorString");
  find(api.by_pci_bus_id, "nvmlDeviceGetHandleByPciBusId_v2");
  find(api.utilization, "nvmlDeviceGetUtilizationRates");
  find(api.memory, "nvmlDeviceGetMemoryInfo");
  find(api.power, "nvmlDeviceGetPowerUsage");
  find(api.temperature, "nvmlDeviceGetTemperature");
  find(api.clock, "nvmlDeviceGetClockInfo");
  return missing->empty();
}

}  // namespace

std::unique_ptr<NvmlDevice> NvmlDevice::open(const std::string& pci_bus_id, std::string* why,
                                             const std::string& library) {
  std::string reason;
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    *why = fmt::format("cannot load {} ({}); it comes with the NVIDIA driver", library, error ? error : "?");
    return nullptr;
  }
  auto api = std::make_unique<Api>();
  std::string missing;
  nvmlReturn_t rc = kNvmlSuccess;
  nvmlDevice_t device = nullptr;
  if (!load_api(handle, *api, &missing)) {
    reason = fmt::format("{} lacks {}; is it NVIDIA's NVML library?", library, missing);
  } else if ((rc = api->init()) != kNvmlSuccess) {
    reason = fmt::format("nvmlInit_v2 failed: {}", api->message(rc));
  } else if ((rc = api->by_pci_bus_id(pci_bus_id.c_str(), &device)) != kNvmlSuccess) {
    reason = fmt::format("NVML has no GPU at PCI bus id {}: {}", pci_bus_id, api->message(rc));
    api->shutdown();
  }
  if (!reason.empty()) {
    dlclose(handle);
    *why = reason;
    return nullptr;
  }
  return std::unique_ptr<NvmlDevice>(new NvmlDevice(handle, std::move(api), device));
}

NvmlDevice::NvmlDevice(void* handle, std::unique_ptr<Api> api, void* device)
    : handle_(handle), api_(std::move(api)), device_(device) {}

NvmlDevice::~NvmlDevice() {
  api_->shutdown();
  dlclose(handle_);
}

GpuSample NvmlDevice::sample() const {
  // A field this GPU does not report (NVML_ERROR_NOT_SUPPORTED: utilisation and power on MIG
  // instances, some fields in sandboxes) is absent (NaN: left out of metrics and charts); the
  // others are still read. Any other failure stops the sampler with NVML's message.
  const auto read = [&](nvmlReturn_t rc, const char* call) {
    if (rc == kNvmlNotSupported) return false;
    STOKER_CHECK(rc == kNvmlSuccess, "GPU telemetry: {} failed: {}", call, api_->message(rc));
    return true;
  };
  constexpr double kAbsent = std::numeric_limits<double>::quiet_NaN();
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  nvmlUtilization_t util{};
  nvmlMemory_t memory{};
  unsigned int milliwatts = 0, celsius = 0, mhz = 0;
  GpuSample s;
  s.utilization = read(api_->utilization(device_, &util), "nvmlDeviceGetUtilizationRates") ? util.gpu : kAbsent;
  const bool has_memory = read(api_->memory(device_, &memory), "nvmlDeviceGetMemoryInfo");
  s.memory_used_gib = has_memory ? static_cast<double>(memory.used) / kGiB : kAbsent;
  s.memory_total_gib = has_memory ? static_cast<double>(memory.total) / kGiB : kAbsent;
  s.power_w = read(api_->power(device_, &milliwatts), "nvmlDeviceGetPowerUsage") ? milliwatts / 1000.0 : kAbsent;
  s.temperature_c =
      read(api_->temperature(device_, kNvmlTemperatureGpu, &celsius), "nvmlDeviceGetTemperature") ? celsius : kAbsent;
  s.sm_clock_mhz = read(api_->clock(device_, kNvmlClockSm, &mhz), "nvmlDeviceGetClockInfo") ? mhz : kAbsent;
  return s;
}

std::string cuda_pci_bus_id(int index, std::string* why) {
#ifdef STOKER_WITH_CUDA
  char bus_id[64] = {};
  const cudaError_t rc = cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, index);
  if (rc != cudaSuccess) {
    *why = fmt::format("cudaDeviceGetPCIBusId({}) failed: {}", index, cudaGetErrorString(rc));
    return "";
  }
  return bus_id;
#else
  *why = fmt::format("this build has no CUDA parts, so CUDA device {} cannot be matched to an NVML GPU", index);
  return "";
#endif
}

// ---- the sampler ------------------------------------------------------------------------------------

TelemetrySampler::TelemetrySampler(std::function<GpuSample()> read, double interval_s)
    : read_(std::move(read)), interval_(interval_s) {
  STOKER_CHECK(interval_s > 0, "GPU telemetry: the sampling interval must be positive, got {} s", interval_s);
  thread_ = std::thread([this] { run(); });
}

TelemetrySampler::~TelemetrySampler() { stop(); }

void TelemetrySampler::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void TelemetrySampler::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    lock.unlock();
    GpuSample sample;
    std::string error;
    try {
      sample = read_();
    } catch (const std::exception& e) {
      error = e.what();
    }
    lock.lock();
    if (!error.empty()) {
      error_ = error;
      logger().warn("GPU telemetry stopped: {}", error);
      return;
    }
    latest_ = sample;
    sum_.utilization += sample.utilization;
    sum_.memory_used_gib = std::isnan(sample.memory_used_gib) ? sample.memory_used_gib
                                                              : std::max(sum_.memory_used_gib, sample.memory_used_gib);
    sum_.memory_total_gib = sample.memory_total_gib;
    sum_.power_w += sample.power_w;
    sum_.temperature_c += sample.temperature_c;
    sum_.sm_clock_mhz += sample.sm_clock_mhz;
    ++in_sum_;
    taken_.fetch_add(1);
    wake_.wait_for(lock, interval_, [this] { return stopping_; });
  }
}

std::optional<GpuSample> TelemetrySampler::latest() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return latest_;
}

std::optional<GpuSample> TelemetrySampler::take_mean() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (in_sum_ == 0) return latest_;
  GpuSample mean = sum_;
  const double n = static_cast<double>(in_sum_);
  mean.utilization /= n;
  mean.power_w /= n;
  mean.temperature_c /= n;
  mean.sm_clock_mhz /= n;
  sum_ = GpuSample{};
  in_sum_ = 0;
  return mean;
}

std::string TelemetrySampler::error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

// ---- for the run ------------------------------------------------------------------------------------

namespace {

std::shared_ptr<NvmlDevice> open_for(const torch::Device& device, const TelemetryOptions& options,
                                     std::string* why) {
  if (!device.is_cuda()) {
    *why = fmt::format("training on {}, not a CUDA GPU", device.str());
    return nullptr;
  }
  const int index = device.has_index() ? device.index() : 0;
  const std::string bus_id = cuda_pci_bus_id(index, why);
  if (bus_id.empty()) return nullptr;
  return NvmlDevice::open(bus_id, why, options.library);
}

}  // namespace

std::unique_ptr<TelemetrySampler> start_gpu_telemetry(const torch::Device& device, const TelemetryOptions& options,
                                                      std::string* why) {
  std::string reason;
  std::shared_ptr<NvmlDevice> nvml = open_for(device, options, &reason);
  if (!nvml) {
    logger().info("GPU telemetry off: {}", reason);
    if (why != nullptr) *why = reason;
    return nullptr;
  }
  logger().debug("GPU telemetry: NVML every {} s for {}", options.interval_s, device.str());
  return std::make_unique<TelemetrySampler>([nvml] { return nvml->sample(); }, options.interval_s);
}

}  // namespace stoker
