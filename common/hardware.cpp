// Hardware detection (hardware.h): the CPU's instruction sets from libtorch's cpuinfo and the oneDNN
// ISA cap, a GPU's compute capability from its properties.
#include "common/hardware.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>

#include <ATen/cpu/Utils.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <c10/util/Exception.h>

#ifdef STOKER_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace stoker {
namespace {

// oneDNN's ISA levels in the order ONEDNN_MAX_CPU_ISA caps them (oneDNN's docs, "CPU ISA hints"); a
// cap lets oneDNN use its level and those before it.
enum IsaLevel { kSse41, kAvx, kAvx2, kAvx2Vnni, kAvx2Vnni2, kAvx512Core, kAvx512Vnni, kAvx512Bf16, kAvx512Fp16,
                kAmx, kAmxFp16, kAll };

IsaLevel cap_level(std::string cap) {
  std::transform(cap.begin(), cap.end(), cap.begin(), [](unsigned char c) { return std::toupper(c); });
  static const std::map<std::string, IsaLevel> kLevels = {
      {"SSE41", kSse41},
      {"AVX", kAvx},
      {"AVX2", kAvx2},
      {"AVX2_VNNI", kAvx2Vnni},
      {"AVX2_VNNI_2", kAvx2Vnni2},
      {"AVX512_CORE", kAvx512Core},
      {"AVX512_CORE_VNNI", kAvx512Vnni},
      {"AVX512_CORE_BF16", kAvx512Bf16},
      {"AVX512_CORE_FP16", kAvx512Fp16},
      {"AVX10_1_512", kAvx512Fp16},
      {"AVX512_CORE_AMX", kAmx},
      {"AVX10_1_512_AMX", kAmx},
      {"AVX512_CORE_AMX_FP16", kAmxFp16},
      {"AVX10_1_512_AMX_FP16", kAmxFp16}};
  const auto it = kLevels.find(cap);
  return it == kLevels.end() ? kAll : it->second;  // unset, ALL, DEFAULT or unknown: no cap
}

std::string onednn_cap_from_environment() {
  for (const char* name : {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"}) {
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') return value;
  }
  return "";
}

bool flag(const std::map<std::string, bool>& flags, const char* name) {
  const auto it = flags.find(name);
  return it != flags.end() && it->second;
}

}  // namespace

HardwareFeatures cpu_features(const std::map<std::string, bool>& flags, const std::string& cpu_name,
                              const std::string& onednn_cap) {
  HardwareFeatures hw;
  hw.type = c10::DeviceType::CPU;
  hw.name = cpu_name.empty() ? "this CPU" : cpu_name;
  hw.onednn_cap = onednn_cap;
  const bool avx512_core = flag(flags, "avx512_f") && flag(flags, "avx512_bw") && flag(flags, "avx512_vl") &&
                           flag(flags, "avx512_dq");
  const bool avx2_vnni_2 = flag(flags, "avx2") && flag(flags, "avx_vnni") && flag(flags, "avx_vnni_int8") &&
                           flag(flags, "avx_ne_convert");
  const std::vector<std::pair<std::string, bool>> listed = {
      {"AVX2", flag(flags, "avx2")},
      {"FMA", flag(flags, "fma3")},
      {"AVX-512", avx512_core},
      {"AVX512_BF16", flag(flags, "avx512_bf16")},
      {"AMX-BF16", flag(flags, "amx_bf16")},
      {"AVX-VNNI", flag(flags, "avx_vnni")},
      {"AVX-NE-CONVERT", flag(flags, "avx_ne_convert")}};
  for (const auto& [name, present] : listed) (present ? hw.isa : hw.missing_isa).push_back(name);

  const IsaLevel cap = cap_level(onednn_cap);
  const bool core_path = avx512_core && cap >= kAvx512Core;
  const bool vnni2_path = avx2_vnni_2 && cap >= kAvx2Vnni2;
  hw.onednn_bf16 = core_path || vnni2_path;
  hw.native_bf16 = (core_path && flag(flags, "avx512_bf16") && cap >= kAvx512Bf16) ||
                   (core_path && flag(flags, "amx_bf16") && cap >= kAmx) || vnni2_path;
  return hw;
}

HardwareFeatures cuda_features(const std::string& gpu_name, int sm) {
  HardwareFeatures hw;
  hw.type = c10::DeviceType::CUDA;
  hw.name = gpu_name;
  hw.sm = sm;
  hw.native_bf16 = sm >= 80;
  return hw;
}

HardwareFeatures detect_hardware(c10::Device device) {
#ifdef STOKER_WITH_CUDA
  if (device.is_cuda()) {
    const cudaDeviceProp* p = at::cuda::getDeviceProperties(device.has_index() ? device.index() : 0);
    return cuda_features(p->name, p->major * 10 + p->minor);
  }
#else
  (void)device;
#endif
  std::map<std::string, bool> flags;
  std::string name;
  for (const auto& [key, value] : at::cpu::get_cpu_capabilities()) {
    if (value.isBool()) flags[key] = value.toBool();
    if (key == "cpu_name" && value.isString()) name = value.toStringRef();
  }
  return cpu_features(flags, name, onednn_cap_from_environment());
}

std::string HardwareFeatures::summary() const {
  if (type == c10::DeviceType::CUDA) {
    return fmt::format("{} (sm_{}): {}", name, sm,
                       sm >= 80 ? "bf16 tensor cores" : sm >= 70 ? "fp16 tensor cores, no bf16 ones" : "no tensor cores");
  }
  std::string line = fmt::format("{}: {}", name, isa.empty() ? std::string("no AVX2") : fmt::format("{}", fmt::join(isa, " ")));
  if (!missing_isa.empty()) line += fmt::format(" (no {})", fmt::join(missing_isa, ", "));
  if (!onednn_cap.empty()) line += fmt::format("; ONEDNN_MAX_CPU_ISA={}", onednn_cap);
  line += native_bf16   ? "; oneDNN runs bf16 natively"
          : onednn_bf16 ? "; oneDNN emulates bf16 (no bf16 dot-product instructions)"
                        : "; no oneDNN bf16 path: bf16 convolutions would run ATen's reference code";
  return line;
}

namespace {
// A "<key>: <n> kB" line of a /proc file, in bytes; 0 when missing.
double proc_kb(const char* file, const char* wanted) {
  std::ifstream in(file);
  std::string key;
  while (in >> key) {
    if (key == wanted) {
      double kb = 0;
      in >> kb;
      return kb * 1024.0;
    }
    in.ignore(1 << 12, '\n');
  }
  return 0;
}
}  // namespace

void reset_peak_memory(c10::Device device) {
#ifdef STOKER_WITH_CUDA
  if (device.is_cuda()) {
    // The last trial's cached blocks go back first: the peak counts reserved bytes, cache included.
    c10::cuda::CUDACachingAllocator::emptyCache();
    c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
    return;
  }
#endif
  (void)device;
  std::ofstream("/proc/self/clear_refs") << "5";
}

double peak_memory_bytes(c10::Device device) {
#ifdef STOKER_WITH_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    return static_cast<double>(stats.reserved_bytes[0].peak);
  }
#endif
  (void)device;
  return proc_kb("/proc/self/status", "VmHWM:");
}

double memory_in_use_bytes(c10::Device device) {
#ifdef STOKER_WITH_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    return static_cast<double>(stats.reserved_bytes[0].current);
  }
#endif
  (void)device;
  return proc_kb("/proc/self/status", "VmRSS:");
}

double available_memory_bytes(c10::Device device) {
#ifdef STOKER_WITH_CUDA
  if (device.is_cuda()) {
    size_t free_bytes = 0, total = 0;
    if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) return 0;
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    const double unused_cache = static_cast<double>(stats.reserved_bytes[0].current - stats.allocated_bytes[0].current);
    return static_cast<double>(free_bytes) + unused_cache;
  }
#endif
  (void)device;
  return proc_kb("/proc/meminfo", "MemAvailable:");
}

bool is_out_of_memory(const std::exception& e) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr) return true;
  const std::string what = e.what();
  for (const char* sign : {"out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED",
                           "CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH", "unable to find an engine"}) {
    if (what.find(sign) != std::string::npos) return true;
  }
  return false;
}

}  // namespace stoker
