// Numeric precision of a training run: which dtype the math runs in, and the RAII guard that turns
// autocast on around the forward pass.
//
//   fp32        everything in float32 (TF32 tensor cores off)
//   tf32        float32 storage; matmuls and convolutions on CUDA may use TF32 tensor cores
//   bf16-mixed  autocast to bfloat16 (CUDA and CPU); weights, gradients and optimizer state fp32
//   fp16-mixed  autocast to float16 (CUDA); fp32 master weights; needs the dynamic loss scaler
//   bf16-true   the model's parameters, gradients, optimizer state and inputs are all bfloat16
//   auto        a request, not a mode: the run picks one of the above for its device from what the
//               hardware can do and a few timed steps (trainer/precision_choice.h); the loop never
//               trains in `auto`
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

#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>

#include <string>
#include <utility>
#include <vector>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

namespace stoker {

enum class Precision { kFp32, kTf32, kBf16Mixed, kFp16Mixed, kBf16True, kAuto };

// Every precision with its name, in the order the docs list them: the one table that parsing,
// printing and the config's key use.
const std::vector<std::pair<std::string, Precision>>& precision_names();
// "fp32" | "tf32" | "bf16-mixed" | "fp16-mixed" | "bf16-true" | "auto"; anything else throws
// stoker::Error listing the valid names.
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
// then also profit) or off (fp32, so that "fp32" means IEEE float32). The run applies it once at
// start (make_training in recipe/factory.h); a Trainer never changes process-wide state, so an
// application that builds its own sets it itself. Returns describe_precision's line.
std::string apply_global_precision(Precision precision);
// What the precision means on the device, for the log ("precision: fp32 (TF32 tensor cores off ...)").
std::string describe_precision(Precision precision);

// Moves `model` to `device` in the precision's parameter dtype (bfloat16 for bf16-true, else
// float32), its 4-D parameters to channels-last when asked: the model as a Trainer expects it.
void prepare_model(torch::nn::Module& model, c10::Device device, Precision precision, bool channels_last);

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

// `model` on `input` as training runs it: under autocast for the mixed precisions, on bfloat16
// inputs for bf16-true (the model's parameters are then bfloat16 too). Evaluation and `trainer eval`
// use it as well, so that every precision evaluates as it trains.
torch::Tensor forward_in_precision(torch::nn::AnyModule& model, const torch::Tensor& input, c10::Device device,
                                   Precision precision);

// For capturing a CUDA graph: turns autocast off for `device`'s type, turns its weight-cast cache
// off and clears it, and restores all three afterwards. An application that calls train_step inside
// its own autocast region would otherwise have its region's dtype, or stale casts of the weights
// from its cache, baked into the graph (PyTorch's make_graphed_callables guards against the same).
// The step's own AutocastGuard still turns autocast on inside it for the mixed precisions; with the
// cache off, every cast is recorded as an op of the graph and replays on the current weights.
class AutocastOffForCapture {
 public:
  explicit AutocastOffForCapture(c10::Device device);
  ~AutocastOffForCapture();
  AutocastOffForCapture(const AutocastOffForCapture&) = delete;
  AutocastOffForCapture& operator=(const AutocastOffForCapture&) = delete;

 private:
  c10::DeviceType type_;
  bool prev_enabled_ = false;
  bool prev_cache_ = true;
};


}  // namespace stoker
