// `train.precision: auto`'s candidates from what the hardware can do fast (common/hardware.h), most
// promising first, and whether an explicit precision runs on a fast path here. The recipe layer
// times the candidates when there are two (recipe/precision_trial.h) and chooses.
//
//   HardwareFeatures hw = detect_hardware(device);
//   PrecisionPlan plan = plan_auto_precision(hw);        // candidates, most promising first
#pragma once

#include <string>
#include <vector>

#include "common/hardware.h"
#include "trainer/precision.h"

namespace stoker {

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

}  // namespace stoker
