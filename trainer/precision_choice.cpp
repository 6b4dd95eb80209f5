#include "trainer/precision_choice.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include <ATen/cpu/Utils.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#ifdef STOKER_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
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

PrecisionPlan plan_auto_precision(const HardwareFeatures& hw) {
  if (hw.type == c10::DeviceType::CUDA) {
    if (hw.sm >= 80) return {{Precision::kBf16Mixed, Precision::kTf32}, "bf16 tensor cores (sm80+)"};
    if (hw.sm >= 70) return {{Precision::kFp16Mixed, Precision::kFp32}, "fp16 tensor cores (sm70-sm75), no bf16 ones"};
    return {{Precision::kFp32}, "no tensor cores (before sm70)"};
  }
  if (!hw.onednn_bf16) {
    return {{Precision::kFp32},
            "no oneDNN bf16 path on this CPU (it needs an AVX-512 core or AVX2-VNNI-2), so bf16 convolutions would "
            "run ATen's reference code, about 10x slower"};
  }
  if (hw.native_bf16) return {{Precision::kBf16Mixed, Precision::kFp32}, "oneDNN runs bf16 natively here"};
  return {{Precision::kFp32, Precision::kBf16Mixed}, "oneDNN emulates bf16 here (no bf16 dot-product instructions)"};
}

bool runs_natively(Precision p, const HardwareFeatures& hw) {
  switch (p) {
    case Precision::kFp32:
    case Precision::kTf32: return true;
    case Precision::kBf16Mixed:
    case Precision::kBf16True: return hw.native_bf16;
    case Precision::kFp16Mixed: return hw.type == c10::DeviceType::CUDA && hw.sm >= 70;
    case Precision::kAuto: return false;
  }
  return false;
}

Precision pick_fastest(const std::vector<StepTime>& times) {
  if (times.empty()) return Precision::kFp32;
  double fastest = times.front().ms;
  for (const StepTime& t : times) fastest = std::min(fastest, t.ms);
  for (const StepTime& t : times) {
    if (t.ms <= 1.03 * fastest) return t.precision;  // the plan's order breaks near-ties
  }
  return times.front().precision;
}

std::string describe_choice(Precision chosen, const PrecisionPlan& plan, const std::vector<StepTime>& times,
                            const HardwareFeatures& hw) {
  std::string how = "not timed: " + plan.reason;
  if (times.size() >= 2) {
    std::vector<std::string> parts;
    double chosen_ms = 0, slowest = 0;
    for (const StepTime& t : times) {
      parts.push_back(fmt::format("{} {:.1f} ms", precision_name(t.precision), t.ms));
      if (t.precision == chosen) chosen_ms = t.ms;
      slowest = std::max(slowest, t.ms);
    }
    how = fmt::format("a training step: {}", fmt::join(parts, ", "));
    if (chosen_ms > 0 && slowest > 1.03 * chosen_ms) how += fmt::format("; {:.2f}x faster", slowest / chosen_ms);
    if (chosen_ms > 0 && slowest <= 1.03 * chosen_ms) how += "; within 3%: the first candidate kept";
  }
  return fmt::format("train.precision: auto -> {} ({}) on {}", precision_name(chosen), how, hw.summary());
}

std::optional<std::string> slow_precision_warning(const StepTime& requested, const StepTime& fp32,
                                                  const HardwareFeatures& hw) {
  if (requested.precision == Precision::kFp32 || fp32.ms <= 0 || requested.ms <= 2.0 * fp32.ms) return std::nullopt;
  return fmt::format("train.precision: {} takes {:.1f} ms per training step here, {:.1f}x float32's {:.1f} ms ({}); "
                     "--set train.precision=fp32 (or auto) would train about {:.1f}x faster",
                     precision_name(requested.precision), requested.ms, requested.ms / fp32.ms, fp32.ms, hw.summary(),
                     requested.ms / fp32.ms);
}

}  // namespace stoker
