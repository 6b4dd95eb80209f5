// Dynamic loss scaling for fp16 mixed precision (libtorch has no GradScaler).
//
// fp16 gradients underflow to zero below ~6e-8. The scaler multiplies the loss by a large factor
// S before backward, so the gradients are S times larger, and divides them by S again before the
// optimizer uses them. When a step's gradients contain inf or NaN (S was too large), that step is
// skipped and S shrinks by `backoff_factor`; after `growth_interval` clean steps in a row S grows
// by `growth_factor`. All of it happens on the device with ATen's `_amp_*` kernels: nothing waits
// for the host, so the GPU is never stalled by the bookkeeping (counters are read only when asked).
//
// A whole loop (this is what stoker::Trainer does with train.precision: fp16-mixed):
//
//   stoker::GradScaler scaler(stoker::GradScalerOptions(), device);
//   auto optimizer = stoker::make_optimizer(optimizer_options, *model, device);
//   for (auto& batch : batches) {
//     torch::Tensor loss;
//     {
//       stoker::AutocastGuard autocast(device, stoker::Precision::kFp16Mixed);
//       loss = torch::nn::functional::cross_entropy(model->forward(batch.input), batch.target);
//     }
//     scaler.scale(loss).backward();       // gradients are S times too large now
//     scaler.unscale(*optimizer);          // only when something must see true gradients:
//     stoker::clip_grad_norm(params, 1.0); //   clipping (after unscale, never before)
//     scaler.step(*optimizer);             // skipped when a gradient was inf/NaN
//     scaler.update();                     // grow or back off S
//     optimizer->zero_grad();
//   }
//
// Without unscale(), step() hands S and the inf flag to Stoker's fused optimizers, which divide the
// gradients inside their own kernel (one pass fewer over the gradients).
#pragma once

#include <cstdint>
#include <vector>

#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>
#include <torch/types.h>

namespace stoker {

// The dynamic loss scaler's options (train.loss_scale in a recipe; `enabled` the run derives from
// train.precision: fp16-mixed only).
struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16, as PyTorch
  double growth_factor = 2.0;   // S *= this after growth_interval clean steps
  double backoff_factor = 0.5;  // S *= this after a step with inf/NaN gradients
  int64_t growth_interval = 2000;
  bool enabled = true;          // disabled: scale() and unscale() do nothing, step() just steps

  GradScalerOptions& with_init_scale(double v) { init_scale = v; return *this; }
  GradScalerOptions& with_growth_factor(double v) { growth_factor = v; return *this; }
  GradScalerOptions& with_backoff_factor(double v) { backoff_factor = v; return *this; }
  GradScalerOptions& with_growth_interval(int64_t v) { growth_interval = v; return *this; }
  GradScalerOptions& with_enabled(bool v) { enabled = v; return *this; }
};

class GradScaler {
 public:
  GradScaler(GradScalerOptions options, torch::Device device);

  bool enabled() const { return options_.enabled; }
  const GradScalerOptions& options() const { return options_; }

  // loss * S (a float32 tensor), or `loss` itself when disabled.
  torch::Tensor scale(const torch::Tensor& loss) const;

  // Divides the gradients of `optimizer`'s parameters by S in place and records whether any of them
  // is inf or NaN. At most once per step; a second call before update() throws.
  void unscale(torch::optim::Optimizer& optimizer);

  // Steps the optimizer unless this step's gradients had inf/NaN. Stoker's optimizers (optim/optim.h)
  // skip on the device; any other torch::optim::Optimizer is stepped after the flag is read on the
  // host (a synchronisation).
  void step(torch::optim::Optimizer& optimizer);

  // Grows or backs off S according to this step's flag, counts a skipped step, and readies the
  // scaler for the next step. Call once per optimizer step, after step().
  void update();

  // Forgets the step in progress (its flag, unscaled or not): for a step abandoned half-way, such as
  // a failed CUDA-graph capture.
  void abandon_step();

  // 1 when this step's gradients had inf/NaN, else 0 (a float tensor on the device, valid after
  // unscale() or step() until update()).
  const torch::Tensor& found_inf() const { return found_inf_; }

  // Read from the device (each is a synchronisation): the current S, the number of steps skipped
  // so far because of inf/NaN gradients.
  double scale_value() const;
  int64_t skipped_steps() const;

  // State for checkpoints: S, the clean-step counter and the skipped-step count.
  void save(torch::serialize::OutputArchive& archive) const;
  // Restores what save() wrote; leaves the state as it is when the archive has none (a checkpoint
  // of a run without loss scaling).
  void load(torch::serialize::InputArchive& archive);

 private:
  enum class Stage { kReady, kUnscaled, kStepped };
  // Finds inf/NaN in the gradients and multiplies them by `inv_scale` (1 to only check).
  void check_and_unscale(torch::optim::Optimizer& optimizer, const torch::Tensor& inv_scale);

  GradScalerOptions options_;
  torch::Tensor scale_;           // float32 [1]
  torch::Tensor growth_tracker_;  // int32 [1]: clean steps since the last change of S
  torch::Tensor found_inf_;       // float32 [1]
  torch::Tensor skipped_;         // float32 [1]: steps skipped so far
  torch::Tensor one_;             // float32 [1] = 1, for checking without unscaling
  Stage stage_ = Stage::kReady;
};

}  // namespace stoker
