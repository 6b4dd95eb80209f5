#include "trainer/precision_choice.h"

namespace stoker {

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

}  // namespace stoker
