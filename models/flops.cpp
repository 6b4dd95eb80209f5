// Model FLOPs from the operators a forward pass runs, a peak table of common GPUs, the CPU's
// measured peak, MFU.
#include "models/flops.h"

#include <ATen/record_function.h>
#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>

#include "common/error.h"

#ifdef STOKER_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace stoker::models {

// ---- counting -------------------------------------------------------------------------------------

namespace {

thread_local FlopCount* counting = nullptr;  // the count of the forward pass on this thread

double numel(const c10::IValue& v) { return v.isTensor() ? static_cast<double>(v.toTensor().numel()) : 0; }

// A convolution's MACs: each output element takes (C_in / groups) x kernel products, that is
// weight.numel() / C_out (weight [C_out, C_in/groups, k...]); transposed, each input element feeds
// weight.numel() / C_in (weight [C_in, C_out/groups, k...]). The inputs are only valid in the start
// callback (the boxed stack is reused for the outputs), the output only in the end callback.
struct ConvolutionContext : at::ObserverContext {
  double per_element = 0;
  double input_elements = 0;
  bool transposed = false;
};

bool is(const at::RecordFunction& fn, const char* name) { return std::strcmp(fn.name(), name) == 0; }

// The fused kernels at::scaled_dot_product_attention dispatches to (the CPU's flash kernel; CUDA's
// flash, memory-efficient and cuDNN ones); its math fallback runs bmm, counted as such.
bool is_fused_attention(const at::RecordFunction& fn) {
  for (const char* kernel : {"aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_flash_attention",
                             "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_cudnn_attention",
                             "aten::_scaled_dot_product_fused_attention_overrideable"}) {
    if (is(fn, kernel)) return true;
  }
  return false;
}

std::unique_ptr<at::ObserverContext> on_operator_start(const at::RecordFunction& fn) {
  if (counting == nullptr) return nullptr;
  const auto inputs = fn.inputs();
  if (is(fn, "aten::convolution") && inputs.size() >= 7 && inputs[1].isTensor()) {
    auto context = std::make_unique<ConvolutionContext>();
    const at::Tensor& weight = inputs[1].toTensor();
    context->per_element = static_cast<double>(weight.numel()) / static_cast<double>(weight.size(0));
    context->input_elements = numel(inputs[0]);
    context->transposed = inputs[6].toBool();
    return context;
  }
  // [n, k] x [k, m] (addmm: self, mat1, mat2; mm: mat1, mat2; bmm: [b, n, k] x [b, k, m]; baddbmm:
  // self, batch1, batch2). Linear layers reach addmm or mm whatever their input's rank (ATen folds the
  // leading dimensions), attention's math path bmm.
  const bool with_self = is(fn, "aten::addmm") || is(fn, "aten::baddbmm");
  const size_t a = with_self ? 1 : 0;
  if ((with_self || is(fn, "aten::mm") || is(fn, "aten::bmm")) && inputs.size() > a + 1 &&
      inputs[a].isTensor() && inputs[a + 1].isTensor()) {
    counting->matmul_macs += numel(inputs[a]) * static_cast<double>(inputs[a + 1].toTensor().size(-1));
    ++counting->matmuls;
  } else if (is_fused_attention(fn) && inputs.size() >= 3 && inputs[0].isTensor() && inputs[1].isTensor() &&
             inputs[2].isTensor()) {
    // q [.., L, E], k [.., S, E], v [.., S, Ev]: q k^T takes L x S x E products per batch and head,
    // the weights times v L x S x Ev (torch.utils.flop_counter's sdpa_flop_count).
    const at::Tensor& q = inputs[0].toTensor();
    const double rows = numel(inputs[0]) / static_cast<double>(q.size(-1));  // batch x heads x L
    const auto s = static_cast<double>(inputs[1].toTensor().size(-2));
    counting->matmul_macs += rows * s * static_cast<double>(q.size(-1) + inputs[2].toTensor().size(-1));
    counting->matmuls += 2;
  }
  return nullptr;
}

void on_operator_end(const at::RecordFunction& fn, at::ObserverContext* context) {
  if (counting == nullptr || context == nullptr || !is(fn, "aten::convolution")) return;
  const auto* conv = static_cast<const ConvolutionContext*>(context);
  const double elements = conv->transposed ? conv->input_elements
                          : fn.outputs().empty() ? 0 : numel(fn.outputs()[0]);
  counting->conv_macs += conv->per_element * elements;
  ++counting->convolutions;
}

}  // namespace

FlopCount count_forward_flops(torch::nn::AnyModule& model, const std::vector<int64_t>& sample_shape) {
  STOKER_CHECK(!sample_shape.empty(), "counting FLOPs needs the shape of one sample, e.g. [3, 224, 224]");
  torch::nn::Module& module = *model.ptr();
  const auto parameters = module.parameters();
  const torch::Device device = parameters.empty() ? torch::Device(torch::kCPU) : parameters.front().device();
  std::vector<int64_t> shape = {1};
  shape.insert(shape.end(), sample_shape.begin(), sample_shape.end());
  const torch::Tensor input = torch::zeros(shape, torch::TensorOptions().device(device));

  const bool was_training = module.is_training();
  module.eval();  // batch norm uses its running statistics and leaves them alone
  FlopCount count;
  counting = &count;
  const at::CallbackHandle handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(&on_operator_start, &on_operator_end).needsInputs(true).needsOutputs(true));
  try {
    torch::NoGradGuard no_grad;
    model.forward(input);
  } catch (...) {
    at::removeCallback(handle);
    counting = nullptr;
    module.train(was_training);
    throw;
  }
  at::removeCallback(handle);
  counting = nullptr;
  module.train(was_training);
  STOKER_CHECK(count.macs() > 0, "counted no convolution or matrix product in the model's forward pass "
               "on a [1, {}] input; is at::RecordFunction disabled in this libtorch?",
               fmt::join(sample_shape, ", "));
  return count;
}

double training_flops_per_sample(torch::nn::AnyModule& model, const std::vector<int64_t>& sample_shape) {
  return count_forward_flops(model, sample_shape).training_flops();
}

// ---- peaks ------------------------------------------------------------------------------------------

std::string math_type_name(MathType math) {
  switch (math) {
    case MathType::kFp32: return "fp32";
    case MathType::kTf32: return "tf32";
    case MathType::kBf16: return "bf16";
    case MathType::kFp16: return "fp16";
  }
  return "?";
}

// Dense TFLOP/s from NVIDIA's datasheets (the sparse figures they print first halved). Tensor-core
// bf16/fp16 with FP32 accumulation, as PyTorch computes. "approx." marks a number derived, not printed.
const std::vector<GpuPeak>& peak_flops_table() {
  static const std::vector<GpuPeak> table = {
      {"H100 PCIe", 51.2, 378.0, 756.0, 756.0, "NVIDIA H100 datasheet (PCIe)"},
      {"H100 NVL", 60.0, 417.5, 835.0, 835.0, "NVIDIA H100 datasheet (NVL, per GPU)"},
      {"H100", 67.0, 494.7, 989.4, 989.4, "NVIDIA H100 datasheet (SXM5)"},
      {"H200 NVL", 60.0, 417.5, 835.0, 835.0, "NVIDIA H200 datasheet (NVL)"},
      {"H200", 67.0, 494.7, 989.4, 989.4, "NVIDIA H200 datasheet (SXM)"},
      {"A100", 19.5, 156.0, 312.0, 312.0, "NVIDIA A100 datasheet (SXM4 and PCIe)"},
      {"A10G", 31.2, 62.5, 125.0, 125.0, "approx.: NVIDIA A10 datasheet; AWS's A10G runs at similar clocks"},
      {"A10", 31.2, 62.5, 125.0, 125.0, "NVIDIA A10 datasheet"},
      {"L40S", 91.6, 183.0, 362.1, 362.1, "NVIDIA L40S datasheet"},
      {"L40", 90.5, 90.5, 181.0, 181.0, "NVIDIA L40 datasheet"},
      {"L4", 30.3, 60.0, 121.0, 121.0, "NVIDIA L4 datasheet"},
      {"RTX 4090", 82.6, 82.6, 165.2, 165.2, "NVIDIA Ada GPU architecture whitepaper (FP32 accumulate)"},
  };
  return table;
}

namespace {
std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

const GpuPeak* find_gpu(const std::string& device_name) {
  const std::string name = lower(device_name);
  for (const GpuPeak& gpu : peak_flops_table()) {
    if (name.find(lower(gpu.name_contains)) != std::string::npos) return &gpu;
  }
  return nullptr;
}
}  // namespace

std::optional<double> gpu_peak_flops(const std::string& device_name, MathType math) {
  const GpuPeak* gpu = find_gpu(device_name);
  if (gpu == nullptr) return std::nullopt;
  const double tflops = math == MathType::kFp32   ? gpu->fp32
                        : math == MathType::kTf32 ? gpu->tf32
                        : math == MathType::kBf16 ? gpu->bf16
                                                  : gpu->fp16;
  return tflops * 1e12;
}

double measure_cpu_peak_flops(int64_t n, int repeats, torch::ScalarType dtype) {
  STOKER_CHECK(n > 0 && repeats > 0, "measuring the CPU peak needs a positive size and repeats, got {} and {}",
               n, repeats);
  torch::NoGradGuard no_grad;
  const torch::Tensor a = torch::rand({n, n}).to(dtype), b = torch::rand({n, n}).to(dtype);
  torch::Tensor c = torch::mm(a, b);  // warm-up: threads, caches
  double best = 0;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    torch::mm_out(c, a, b);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (seconds > 0) best = std::max(best, 2.0 * static_cast<double>(n * n * n) / seconds);
  }
  return best;
}

std::optional<double> device_peak_flops(const torch::Device& device, MathType math, std::string* source) {
  if (device.is_cpu()) {
    double peak = measure_cpu_peak_flops();
    std::string type = "float32";
    const bool low = math == MathType::kBf16 || math == MathType::kFp16;
    const torch::ScalarType dtype = math == MathType::kFp16 ? torch::kHalf : torch::kBFloat16;
    if (const double in_low = low ? measure_cpu_peak_flops(1024, 5, dtype) : 0.0; in_low > peak) {
      peak = in_low;
      type = math_type_name(math);
    }
    *source = fmt::format("measured: {} 1024x1024 matmul on {} thread(s){}", type, torch::get_num_threads(),
                          low ? fmt::format(", the faster of float32 and {}", math_type_name(math)) : "");
    return peak;
  }
#ifdef STOKER_WITH_CUDA
  if (device.is_cuda()) {
    const int index = device.has_index() ? device.index() : 0;
    const std::string name = at::cuda::getDeviceProperties(index)->name;
    if (const GpuPeak* gpu = find_gpu(name)) {
      *source = fmt::format("{} {}: {}", name, math_type_name(math), gpu->source);
      return gpu_peak_flops(name, math);
    }
    *source = fmt::format("{} is not in the peak table (models/flops.cpp); no MFU", name);
    return std::nullopt;
  }
#endif
  *source = fmt::format("no peak known for {}", device.str());
  return std::nullopt;
}

double mfu(double achieved_flops, double peak_flops) {
  STOKER_CHECK(peak_flops > 0, "MFU needs a positive peak, got {} FLOP/s", peak_flops);
  return achieved_flops / peak_flops;
}

}  // namespace stoker::models
