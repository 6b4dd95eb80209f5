#include "trainer/precision.h"

#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include "common/error.h"

namespace stoker {

const std::vector<std::pair<std::string, Precision>>& precision_names() {
  static const std::vector<std::pair<std::string, Precision>> kNames = {
      {"fp32", Precision::kFp32},       {"tf32", Precision::kTf32},           {"bf16-mixed", Precision::kBf16Mixed},
      {"fp16-mixed", Precision::kFp16Mixed}, {"bf16-true", Precision::kBf16True}, {"auto", Precision::kAuto}};
  return kNames;
}

Precision parse_precision(const std::string& name) {
  std::string all;
  for (const auto& [n, p] : precision_names()) {
    if (n == name) return p;
    all += (all.empty() ? "" : ", ") + n;
  }
  STOKER_FAIL("train.precision '{}' is not known; use one of {}", name, all);
}

std::string precision_name(Precision precision) {
  for (const auto& [n, p] : precision_names()) {
    if (p == precision) return n;
  }
  return "?";
}

bool is_mixed(Precision p) { return p == Precision::kBf16Mixed || p == Precision::kFp16Mixed; }

c10::ScalarType autocast_dtype(Precision p) {
  if (p == Precision::kBf16Mixed) return c10::ScalarType::BFloat16;
  if (p == Precision::kFp16Mixed) return c10::ScalarType::Half;
  return c10::ScalarType::Float;
}

bool needs_loss_scaling(Precision p) { return p == Precision::kFp16Mixed; }

c10::ScalarType parameter_dtype(Precision p) {
  return p == Precision::kBf16True ? c10::ScalarType::BFloat16 : c10::ScalarType::Float;
}

namespace {
bool allows_tf32(Precision precision) { return precision != Precision::kFp32; }
}  // namespace

std::string apply_global_precision(Precision precision) {
  const bool tf32 = allows_tf32(precision);
  at::globalContext().setAllowTF32CuBLAS(tf32);
  at::globalContext().setAllowTF32CuDNN(tf32);
  return describe_precision(precision);
}

std::string describe_precision(Precision precision) {
  const bool tf32 = allows_tf32(precision);
  return fmt::format("precision: {} (TF32 tensor cores {} for float32 matmuls and convolutions on CUDA{})",
                     precision_name(precision), tf32 ? "allowed" : "off",
                     is_mixed(precision) ? fmt::format("; autocast to {}", c10::toString(autocast_dtype(precision)))
                                         : "");
}

void prepare_model(torch::nn::Module& model, c10::Device device, Precision precision, bool channels_last) {
  model.to(device, parameter_dtype(precision));
  if (!channels_last) return;
  torch::NoGradGuard no_grad;
  for (auto& p : model.parameters()) {
    if (p.dim() == 4) p.set_data(p.data().contiguous(torch::MemoryFormat::ChannelsLast));
  }
}

AutocastGuard::AutocastGuard(c10::Device device, Precision precision) : type_(device.type()) {
  if (!is_mixed(precision)) return;
  active_ = true;
  prev_enabled_ = at::autocast::is_autocast_enabled(type_);
  prev_dtype_ = at::autocast::get_autocast_dtype(type_);
  at::autocast::set_autocast_enabled(type_, true);
  at::autocast::set_autocast_dtype(type_, autocast_dtype(precision));
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  // As torch.autocast.__exit__: drop the cache of casted weights when the outermost region ends.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(type_, prev_enabled_);
  at::autocast::set_autocast_dtype(type_, prev_dtype_);
}

torch::Tensor forward_in_precision(torch::nn::AnyModule& model, const torch::Tensor& input, c10::Device device,
                                   Precision precision) {
  AutocastGuard autocast(device, precision);
  if (precision == Precision::kBf16True && input.scalar_type() != torch::kBFloat16) {
    return model.forward(input.to(torch::kBFloat16));
  }
  return model.forward(input);
}

AutocastOffForCapture::AutocastOffForCapture(c10::Device device) : type_(device.type()) {
  prev_enabled_ = at::autocast::is_autocast_enabled(type_);
  prev_cache_ = at::autocast::is_autocast_cache_enabled();
  at::autocast::set_autocast_enabled(type_, false);
  at::autocast::set_autocast_cache_enabled(false);
  at::autocast::clear_cache();
}

AutocastOffForCapture::~AutocastOffForCapture() {
  at::autocast::set_autocast_cache_enabled(prev_cache_);
  at::autocast::set_autocast_enabled(type_, prev_enabled_);
}

}  // namespace stoker
