// Numeric precision of a training run: which dtype the math runs in, and the RAII guard that turns
// autocast on around the forward pass.
//
//   fp32        everything in float32 (TF32 tensor cores off)
//   tf32        float32 storage; matmuls and convolutions on CUDA may use TF32 tensor cores
//   bf16-mixed  autocast to bfloat16 (CUDA and CPU); weights, gradients and optimizer state fp32
//   fp16-mixed  autocast to float16 (CUDA); fp32 master weights; needs the dynamic loss scaler
//   bf16-true   the model's parameters, gradients, optimizer state and inputs are all bfloat16
//
// Usage, as the Trainer does it:
//   stoker::apply_global_precision(Precision::kTf32);          // once, at start-up
//   {
//     stoker::AutocastGuard autocast(device, precision);       // no-op unless a *-mixed mode
//     logits = model->forward(input);
//     loss = criterion(logits, target);                        // still under autocast, as PyTorch does
//   }
//   loss.backward();                                           // outside the guard
#pragma once

#include <string>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

namespace stoker {

enum class Precision { kFp32, kTf32, kBf16Mixed, kFp16Mixed, kBf16True };

// "fp32" | "tf32" | "bf16-mixed" | "fp16-mixed" | "bf16-true"; anything else throws stoker::Error
// listing the valid names.
Precision parse_precision(const std::string& name);
std::string precision_name(Precision precision);

// The dtype autocast computes in for a mixed mode (bf16 or fp16); Float for the others.
c10::ScalarType autocast_dtype(Precision precision);
bool is_mixed(Precision precision);
// Whether gradients need the dynamic loss scaler (fp16-mixed).
bool needs_loss_scaling(Precision precision);
// The dtype of parameters and inputs: BFloat16 for bf16-true, Float otherwise.
c10::ScalarType parameter_dtype(Precision precision);

// Process-wide settings: TF32 for cuBLAS and cuDNN on (tf32 and the mixed modes, whose fp32 ops
// then also profit) or off (fp32, so that "fp32" means IEEE float32). Returns a line for the log.
std::string apply_global_precision(Precision precision);

// Turns autocast on for `device`'s type with the precision's dtype for the guard's lifetime and
// restores the previous state after (nesting works; the cast cache is cleared on the outermost exit,
// as torch.autocast does). Does nothing for the non-mixed precisions. On the CPU, autocast runs
// bf16 and fp16 (fp16 there is for testing the loss-scaling path; it is not fast).
class AutocastGuard {
 public:
  AutocastGuard(c10::Device device, Precision precision);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool active_ = false;
  c10::DeviceType type_;
  bool prev_enabled_ = false;
  c10::ScalarType prev_dtype_ = c10::ScalarType::Float;
};


}  // namespace stoker
