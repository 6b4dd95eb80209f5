// What the hardware can do fast, and `train.precision: auto`'s choice from it: detect, time a few
// steps when that is cheap, choose, and say why in one line.
//
// Why bf16 is fast on one CPU and 13x slower on another: ATen sends a bfloat16 convolution or matmul
// to oneDNN only where oneDNN has a bf16 path on this CPU (libtorch's own check, ideep's
// has_bf16_type_support: an AVX-512 core (F, BW, VL, DQ) or AVX2-VNNI-2, within the ISA that
// ONEDNN_MAX_CPU_ISA allows); elsewhere, AVX2-only CPUs among them, it runs its reference
// convolution, about ten times slower than float32. With the oneDNN path, bf16 is fast where the CPU
// has bf16 dot products (AVX512_BF16, AMX-BF16, AVX-NE-CONVERT) and emulated, about as fast as
// float32 or slower, on a plain AVX-512 core. On CUDA, bf16 tensor cores need sm80+ (Ampere);
// Volta and Turing have fp16 ones.
//
//   HardwareFeatures hw = detect_hardware(device);
//   PrecisionPlan plan = plan_auto_precision(hw);        // candidates, most promising first
//   ... time a few steps of each candidate (the recipe layer does: choose_precision in factory.h) ...
//   Precision p = pick_fastest(times);
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "trainer/precision.h"

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

// The precisions `auto` chooses among on this hardware, the most promising first, with why. One
// candidate: the features decide and nothing needs timing (a CPU without oneDNN's bf16 path: fp32).
struct PrecisionPlan {
  std::vector<Precision> candidates;
  std::string reason;
};
PrecisionPlan plan_auto_precision(const HardwareFeatures& hardware);

// Whether `precision` runs on a fast path of this hardware (nothing to check against float32):
// fp32 and tf32 everywhere; bf16 where native_bf16; fp16-mixed on CUDA sm70+.
bool runs_natively(Precision precision, const HardwareFeatures& hardware);

// One candidate's measured training step.
struct StepTime {
  Precision precision = Precision::kFp32;
  double ms = 0;          // mean of the timed steps
  int64_t steps = 0;      // how many were timed
};
// The candidate with the fastest step; one within 3% of the fastest that comes earlier in `times`
// (the plan's order) wins the tie, so that noise does not flip the choice between two equal ones.
Precision pick_fastest(const std::vector<StepTime>& times);

// The one line `auto` logs: the choice, the features it rested on and the step times.
std::string describe_choice(Precision chosen, const PrecisionPlan& plan, const std::vector<StepTime>& times,
                            const HardwareFeatures& hardware);

// An explicit precision whose step took more than twice float32's on this device: the warning, naming
// the faster choice; nothing otherwise.
std::optional<std::string> slow_precision_warning(const StepTime& requested, const StepTime& fp32,
                                                  const HardwareFeatures& hardware);

}  // namespace stoker
