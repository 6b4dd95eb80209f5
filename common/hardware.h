// What the device a run trains on can do fast: a CPU's instruction sets and whether oneDNN has a
// bf16 path on it, a GPU's compute capability. Below the loop so that the trainer (precision
// choice), observe/ (environment.json) and the doctor read one detection.
//
// Why bf16 is fast on one CPU and 13x slower on another: ATen sends a bfloat16 convolution or matmul
// to oneDNN only where oneDNN has a bf16 path on this CPU (libtorch's own check, ideep's
// has_bf16_type_support: an AVX-512 core (F, BW, VL, DQ) or AVX2-VNNI-2, within the ISA that
// ONEDNN_MAX_CPU_ISA allows); elsewhere, AVX2-only CPUs among them, it runs its reference
// convolution, about ten times slower than float32. With the oneDNN path, bf16 is fast where the CPU
// has bf16 dot products (AVX512_BF16, AMX-BF16, AVX-NE-CONVERT) and emulated, about as fast as
// float32 or slower, on a plain AVX-512 core. On CUDA, bf16 tensor cores need sm80+ (Ampere);
// Volta and Turing have fp16 ones.
#pragma once

#include <exception>
#include <map>
#include <string>
#include <vector>

#include <c10/core/Device.h>

namespace stoker {

struct HardwareFeatures {
  c10::DeviceType type = c10::DeviceType::CPU;
  std::string name;               // "Intel Xeon", "NVIDIA H100 80GB HBM3"
  // CPU: the instruction sets that matter for training speed, as cpuinfo reports them ("AVX2", "FMA",
  // "AVX-512", "AVX512_BF16", "AMX-BF16", "AVX-NE-CONVERT", "AVX-VNNI", ...), present and absent.
  std::vector<std::string> isa, missing_isa;
  std::string onednn_cap;         // ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA) as set; "" when not
  bool onednn_bf16 = false;       // CPU: ATen runs bf16 convolutions and matmuls in oneDNN here
  bool native_bf16 = false;       // CPU: oneDNN has bf16 dot products here; CUDA: bf16 tensor cores (sm80+)
  int sm = 0;                     // CUDA: compute capability, major * 10 + minor
  // One line for logs and reports, e.g. "Intel Xeon: AVX2 FMA AVX-512 AVX512_BF16 (no AMX-BF16);
  // oneDNN runs bf16 natively".
  std::string summary() const;
};

// The features of the device training runs on (the CPU's from libtorch's cpuinfo, at::cpu::
// get_cpu_capabilities; a GPU's from its properties).
HardwareFeatures detect_hardware(c10::Device device);
// The CPU's features from cpuinfo's flags (at::cpu::get_cpu_capabilities' booleans) and the oneDNN ISA
// cap: detect_hardware's logic, callable with any flags (tests force each answer with it).
HardwareFeatures cpu_features(const std::map<std::string, bool>& flags, const std::string& cpu_name,
                              const std::string& onednn_cap);
HardwareFeatures cuda_features(const std::string& gpu_name, int sm);

// ---- memory ---------------------------------------------------------------------------------------
// What the doctor's batch sweep and the precision trial bound their steps by. On CUDA, the caching
// allocator's bytes; on the CPU, the process's resident set (/proc/self/status) and MemAvailable.

// Starts a new peak (CUDA: the allocator's cached blocks released first; CPU: VmHWM reset to the
// current resident set through /proc/self/clear_refs).
void reset_peak_memory(c10::Device device);
// The peak since reset_peak_memory: reserved bytes on CUDA, VmHWM on the CPU.
double peak_memory_bytes(c10::Device device);
// What is in use now: reserved bytes on CUDA, VmRSS on the CPU.
double memory_in_use_bytes(c10::Device device);
// What more could be had: free device memory plus the allocator's unused cache on CUDA, MemAvailable on
// the CPU; 0 when unknown.
double available_memory_bytes(c10::Device device);
// Out of memory, as the allocator says it or as cuDNN and cuBLAS do when their workspaces cannot be
// had under memory pressure (they fail to find an engine, or to allocate).
bool is_out_of_memory(const std::exception& e);

}  // namespace stoker
