// Model FLOPs and how close training comes to the device's peak (MFU).
// - count_forward_flops: the multiply-accumulates (MACs) of a model's forward pass, counted from
//   the shapes of every convolution and matrix product it actually runs.
// - peak_flops_table / gpu_peak_flops: dense peak TFLOP/s of common GPUs for each math type.
// - measure_cpu_peak_flops: the CPU's matmul rate, measured.
// - mfu: achieved / peak.
//
// Convention (as in the PaLM paper's MFU and torch.utils.flop_counter): FLOPs = 2 x MACs, counted
// for convolutions and matrix products only (attention's q k^T and weights x v among them; batch
// norm, ReLU, pooling, additions are left out, as torchvision's "GFLOPS" column, which is in fact
// MACs: resnet18 at 224x224 = 1.81 G MACs = 3.63 GFLOPs). A training step costs 3 x the forward
// pass (forward, and the backward's two products per layer: the input's and the weights' gradients).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <c10/core/Device.h>
#include <torch/nn/modules/container/any.h>

namespace stoker::models {

struct FlopCount {
  double conv_macs = 0;    // every aten::convolution (conv1d/2d/3d, transposed, grouped)
  double matmul_macs = 0;  // aten::addmm, mm, bmm, baddbmm (Linear, matmul) and the fused attention kernels
  int64_t convolutions = 0, matmuls = 0;
  double macs() const { return conv_macs + matmul_macs; }
  double flops() const { return 2 * macs(); }
  // A training step's FLOPs: 3 x the forward's (see the convention above).
  double training_flops() const { return 3 * flops(); }
};

// Runs `model` once in eval mode under no_grad on a zero batch of one sample of `sample_shape`
// (C, H, W) on the model's device, counting the MACs of the operators it calls (through
// at::RecordFunction observers, the hooks PyTorch's profiler uses: libtorch modules have no
// forward hooks). Exact for any input size, also where shapes depend on the input; the model's
// training mode is restored and its weights and batch-norm statistics are left as they were.
FlopCount count_forward_flops(torch::nn::AnyModule& model, const std::vector<int64_t>& sample_shape);
// 3 x the forward FLOPs per sample: what achieved TFLOP/s and MFU count.
double training_flops_per_sample(torch::nn::AnyModule& model, const std::vector<int64_t>& sample_shape);

// The arithmetic the training step's matrix products use (fp32 and tf32 are the TrainerOptions'
// precisions; the mixed and bf16-true modes compute in bf16 or fp16).
enum class MathType { kFp32, kTf32, kBf16, kFp16 };
std::string math_type_name(MathType math);

struct GpuPeak {
  const char* name_contains;  // matched against the CUDA device name, case-insensitively
  double fp32, tf32, bf16, fp16;  // dense TFLOP/s (no structured sparsity), FP32 accumulation
  const char* source;
};
// The table, most specific names first (see flops.cpp for the sources).
const std::vector<GpuPeak>& peak_flops_table();
// Peak FLOP/s of the GPU named `device_name` (e.g. "NVIDIA H100 80GB HBM3") for `math`; nullopt
// for a GPU not in the table.
std::optional<double> gpu_peak_flops(const std::string& device_name, MathType math);

// The best FLOP/s of `repeats` n x n matmuls in `dtype` on the CPU with the current intra-op threads
// (about 0.2 s for n = 1024 on two cores in float32): the peak the CPU's MFU is measured against.
double measure_cpu_peak_flops(int64_t n = 1024, int repeats = 5, torch::ScalarType dtype = torch::kFloat);

// The peak for training on `device` in `math`: the table's entry for a CUDA GPU (nullopt, with
// `source` saying so, for a GPU not in it); for the CPU, measure_cpu_peak_flops() in float32 and,
// for bf16 / fp16 math, in that type too, the faster of the two (oneDNN's bf16 kernels can beat
// float32 even without native bf16 instructions, and an MFU over 100% would say nothing).
// `source` says where the number comes from, for the log and the report.
std::optional<double> device_peak_flops(const torch::Device& device, MathType math, std::string* source);

// achieved / peak (both FLOP/s); an Error when the peak is not positive.
double mfu(double achieved_flops, double peak_flops);

}  // namespace stoker::models
