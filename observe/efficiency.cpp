#include "observe/efficiency.h"

#include <fmt/format.h>

#include "common/log.h"

namespace stoker {

models::MathType math_type_of(Precision precision) {
  switch (precision) {
    case Precision::kFp32: return models::MathType::kFp32;
    case Precision::kTf32: return models::MathType::kTf32;
    case Precision::kFp16Mixed: return models::MathType::kFp16;
    case Precision::kBf16Mixed:
    case Precision::kBf16True: return models::MathType::kBf16;
    case Precision::kAuto: break;  // resolved before a run measures anything
  }
  return models::MathType::kFp32;
}

Efficiency measure_efficiency(torch::nn::AnyModule& model, const data::InputShape& shape, torch::Device device,
                              Precision precision) {
  Efficiency e;
  const models::FlopCount count = models::count_forward_flops(model, {shape.channels, shape.height, shape.width});
  e.train_flops_per_sample = count.training_flops();
  const std::optional<double> peak = models::device_peak_flops(device, math_type_of(precision), &e.peak_source);
  e.peak_flops = peak.value_or(0.0);
  logger().info("FLOPs: {:.3g} G MACs per {}x{}x{} sample forward ({} convolution(s), {} matrix product(s)), "
                "{:.3g} GFLOPs per sample trained; peak {} ({})",
                count.macs() / 1e9, shape.channels, shape.height, shape.width, count.convolutions, count.matmuls,
                e.train_flops_per_sample / 1e9,
                peak ? fmt::format("{:.3g} TFLOP/s", *peak / 1e12) : std::string("unknown: no MFU"), e.peak_source);
  return e;
}

}  // namespace stoker
