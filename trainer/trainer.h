// The Trainer: the training loop, in one place, read top to bottom in trainer.cpp.
//
// It is built from parts handed to it (a model, a training and an evaluation loader, the config)
// and exposes the steps (forward, compute_loss, backward, optimizer_step), the train_step shortcut,
// evaluate() and fit(). Logging, progress, checkpoints and interruption live in callbacks.
// One step: forward under autocast (train.precision) -> float32 loss / accumulated batches ->
// backward of the loss times the loss scale (fp16-mixed) -> every train.accumulate_steps batches:
// scheduled LR -> unscale -> clip -> fused optimizer step (skipped on inf/NaN) -> scale update ->
// EMA update; with train.cuda_graph, that whole step is captured once and replayed.
//
//   stoker::Trainer trainer(config, model, train_loader, test_loader, device);
//   trainer.add_callback(std::make_shared<MyCallback>());
//   stoker::FitResult result = trainer.fit();
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/nn/modules/container/any.h>
#include <torch/optim/optimizer.h>

#include "data/loader.h"
#include "trainer/checkpoint.h"
#include "trainer/config.h"
#include "optim/grad_scaler.h"
#include "optim/optim.h"
#include "trainer/precision.h"
#include "optim/ema.h"
#include "optim/schedule.h"

namespace stoker {

// What one training step reports to callbacks.
struct StepInfo {
  int64_t epoch = 0;            // 0-based
  int64_t batch = 0;            // 0-based index of the batch within the epoch
  int64_t batches = 0;          // batches in the epoch
  int64_t step = 0;             // optimizer steps taken so far, this one included
  // Whether this batch ended with an optimizer step (always, unless gradients are being
  // accumulated over several batches and this was not the last of them).
  bool optimizer_step = true;
  torch::Tensor loss;           // detached scalar; reading it synchronises with the device
  int64_t samples = 0;          // samples in this step
  double lr = 0;                // learning rate used for this step
  double data_seconds = 0;      // host time spent waiting for the batch
  double step_seconds = 0;      // host time of the whole step, data wait included
};

struct EvalResult {
  double loss = 0;  // mean cross-entropy (no label smoothing)
  double top1 = 0;  // fraction correct
  double top5 = 0;  // fraction with the target among the 5 highest logits (all, with <= 5 classes)
  int64_t samples = 0;  // 0: not evaluated
};

struct EpochResult {
  int64_t epoch = 0;  // 0-based
  double train_loss = 0;
  EvalResult test;
  EvalResult ema_test;  // the EMA of the weights (train.ema_decay); samples == 0 without one
  double seconds = 0;
  double samples_per_s = 0;
  double data_wait = 0;  // share of the epoch's training time spent waiting for data
  data::StageTimes stages;  // the training loader's per-stage times for the epoch
  // fp16-mixed: the loss scale at the end of the epoch and the optimizer steps skipped so far
  // because of inf/NaN gradients (0 and 1 without loss scaling).
  double loss_scale = 1.0;
  int64_t skipped_steps = 0;
};

struct FitResult {
  std::vector<EpochResult> epochs;  // the epochs finished in this call
  bool interrupted = false;         // stopped by request before the last epoch ended
  bool stopped_early = false;       // ended after an epoch by request_finish() (early stopping)
  double seconds = 0;
};

class Trainer;

// Hooks into the loop. Each defaults to nothing.
class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_fit_start(Trainer&) {}
  virtual void on_epoch_start(Trainer&, int64_t /*epoch*/) {}
  virtual void on_train_step_end(Trainer&, const StepInfo&) {}
  virtual void on_validation_end(Trainer&, const EpochResult&) {}
  virtual void on_epoch_end(Trainer&, const EpochResult&) {}
  virtual void on_fit_end(Trainer&, const FitResult&) {}
};

class Trainer {
 public:
  Trainer(Config config, torch::nn::AnyModule model, std::shared_ptr<data::Loader> train,
          std::shared_ptr<data::Loader> test, torch::Device device);
  ~Trainer();

  void add_callback(std::shared_ptr<Callback> callback);

  // ---- the steps ----
  // The model under autocast (mixed precision) or on bf16 inputs (bf16-true).
  torch::Tensor forward(const torch::Tensor& input);
  // Cross-entropy (with the configured label smoothing), computed in float32.
  torch::Tensor compute_loss(const torch::Tensor& logits, const torch::Tensor& target);
  // Backpropagates `loss` divided by the number of batches accumulated into this optimizer step
  // (`accumulate` = 1: as it is), multiplied by the loss scale under fp16-mixed.
  void backward(const torch::Tensor& loss, int64_t accumulate = 1);
  // Sets the scheduled learning rate, unscales and clips the gradients, steps the optimizer (or
  // skips the step when the loss scaler found inf/NaN), updates the loss scale, clears gradients.
  void optimizer_step();
  // forward + loss + backward on one batch, and optimizer_step once the batch completes a group of
  // train.accumulate_steps batches (counted from the start of the epoch, by batch.index; the last
  // group of an epoch may be shorter). With train.cuda_graph on CUDA, the whole step is captured
  // once and replayed. Returns the detached loss.
  torch::Tensor train_step(const data::Batch& batch);

  EvalResult evaluate();
  // evaluate() with the EMA of the weights in the model (the model itself before the first
  // optimizer step); the model's own weights are restored afterwards. Needs train.ema_decay > 0.
  EvalResult evaluate_ema();
  // Trains from state() to the last epoch, evaluating after each epoch.
  FitResult fit();
  // Asks fit() to stop after the current step (safe from a signal handler or another thread).
  void request_stop() { stop_requested_.store(true); }
  // Asks fit() to end after the current epoch as a finished run, not an interrupted one (early
  // stopping).
  void request_finish() { finish_requested_.store(true); }
  bool finish_requested() const { return finish_requested_.load(); }

  // ---- checkpoints ----
  void save_checkpoint(const std::filesystem::path& path);
  // Restores model, optimizer, RNG state and state() from a checkpoint.
  void load_checkpoint(const std::filesystem::path& path);

  // ---- access ----
  const Config& config() const { return config_; }
  TrainState& state() { return state_; }
  torch::nn::Module& module() { return *model_.ptr(); }
  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  torch::Device device() const { return device_; }
  GradScaler& scaler() { return *scaler_; }
  Precision precision() const { return precision_; }
  // What the precision settings mean here, for the log (the constructor applies them: TF32 on or
  // off process-wide, see apply_global_precision).
  const std::string& precision_summary() const { return precision_summary_; }
  // Batches per optimizer step.
  int64_t accumulate_steps() const { return accumulate_; }
  // Optimizer steps per epoch (batches / accumulate_steps, rounded up).
  int64_t steps_per_epoch() const { return (train_->num_batches() + accumulate_ - 1) / accumulate_; }
  // The EMA of the weights; nullptr when train.ema_decay is 0.
  ModelEma* ema() { return ema_.get(); }
  int64_t total_steps() const { return steps_per_epoch() * config_.train.epochs; }
  // Findings of the sizing checks (trainer/sizing.h), logged as warnings by run_training.
  const std::vector<std::string>& sizing_warnings() const { return sizing_warnings_; }
  // Whether training steps run as a replayed CUDA graph (after the warm-up steps).
  bool graph_active() const;
  // The learning rate for optimizer step `step` (0-based) under the configured schedule.
  double lr_at(int64_t step) const;

 private:
  Config config_;
  torch::nn::AnyModule model_;
  std::shared_ptr<data::Loader> train_, test_;
  torch::Device device_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::vector<std::shared_ptr<Callback>> callbacks_;
  TrainState state_;
  std::atomic<bool> stop_requested_{false};

  Precision precision_ = Precision::kFp32;
  std::string precision_summary_;
  int64_t accumulate_ = 1;
  int64_t micro_batches_ = 0;  // batches backpropagated since the last optimizer step
  std::vector<torch::Tensor> params_;  // trainable parameters, for clipping
  std::unique_ptr<GradScaler> scaler_;
  std::vector<std::string> sizing_warnings_;
  std::vector<CheckpointPart> checkpoint_parts();

  // CUDA graph of the whole step (trainer/trainer.cpp: GraphedStep).
  struct GraphedStep;
  std::unique_ptr<GraphedStep> graph_;
  torch::Tensor eager_step(const data::Batch& batch, int64_t accumulate);
  std::optional<torch::Tensor> graphed_step(const data::Batch& batch);
  // Made here, not in the constructor: its tensors are cloned from the model at the first update.
  std::unique_ptr<ModelEma> ema_ =
      config_.train.ema_decay > 0 ? std::make_unique<ModelEma>(config_.train.ema_decay, config_.train.ema_warmup)
                                  : nullptr;
  std::atomic<bool> finish_requested_{false};
};

}  // namespace stoker
