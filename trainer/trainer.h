// The Trainer: the training loop, in one place, read top to bottom in trainer.cpp.
//
// It is built from parts handed to it (Trainer(options, parts, train source, eval source): a model,
// an optimizer, a loss, a loss scaler, a learning-rate schedule, an EMA of the weights) and knows
// nothing of configs; make_trainer (recipe/factory.h) builds the parts from a resolved run plan. It exposes
// the steps (forward, compute_loss, backward, optimizer_step), the train_step shortcut, evaluate()
// and fit(). Logging, progress, checkpoints and interruption live in callbacks.
//
// One step function runs every training step (step_function in trainer.cpp): forward under
// autocast -> float32 loss / accumulated batches -> backward of the loss times the loss scale
// (fp16-mixed) -> every accumulate_steps batches: unscale -> clip -> fused optimizer step (skipped on
// inf/NaN) -> scale update. Eagerly, or captured once as a CUDA graph and replayed (CudaGraphStep,
// trainer/cuda_graph_step.h) — the same function either way.
//
//   auto trainer = stoker::make_trainer(config, model, train, eval, device);  // or Trainer(options, parts, train, eval)
//   trainer->add_callback(std::make_shared<MyCallback>());
//   stoker::FitResult result = trainer->fit();
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/nn/modules/container/any.h>
#include <torch/optim/optimizer.h>

#include "data/batch_source.h"
#include "optim/ema.h"
#include "optim/grad_scaler.h"
#include "parallel/strategy.h"
#include "trainer/checkpoint.h"
#include "trainer/evaluate.h"
#include "trainer/losses.h"
#include "trainer/nonfinite.h"
#include "trainer/precision.h"

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
  // The XOR of data::Batch::digest over the batches of this optimizer step so far, on this rank: which
  // samples (and augmentation draws) it trained on. XORed over the ranks, the global step's digest.
  uint64_t samples_digest = 0;
};

struct FitResult {
  std::vector<EpochResult> epochs;  // the epochs finished in this call
  bool interrupted = false;         // stopped by request before the last epoch ended
  bool stopped_early = false;       // ended after an epoch by request_finish() (early stopping)
  double seconds = 0;
};

// What the loop itself needs to know; everything else comes with the parts.
struct TrainerOptions {
  int64_t epochs = 10;
  Precision precision = Precision::kFp32;
  int64_t accumulate_steps = 1;  // batches per optimizer step
  int64_t batch_size = 0;        // the nominal batch (the CUDA graph replays only batches this large)
  double grad_clip_norm = 0.0;   // clip gradients to this global L2 norm; 0 = off
  bool cuda_graph = false;       // capture the step as a CUDA graph (see CudaGraphStep)
  torch::Device device = torch::kCPU;
  // What an inf/NaN loss, gradient or weight does: stop the run (default) or skip the step.
  NonfiniteOptions nonfinite;
  // Saved in checkpoints beside the weights (the resolved config, for `trainer predict`).
  std::string config_yaml;
  std::vector<std::string> class_names;  // by label, also saved in checkpoints; empty: none known
};

// The loss (LossFunction, trainer/losses.h): float32 logits and targets (class indices or soft
// targets) in, a scalar out.
// The learning rate of optimizer step `step` (0-based).
using LrSchedule = std::function<double(int64_t step)>;

// What a Trainer is made of. The model must already be on options.device in the precision's
// parameter dtype (prepare_model in trainer/precision.h), and the optimizer built over its parameters.
struct TrainerParts {
  torch::nn::AnyModule model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  LossFunction loss;                   // empty: cross-entropy (on class indices or soft targets)
  std::unique_ptr<GradScaler> scaler;  // empty: no loss scaling
  LrSchedule schedule;                 // empty: the optimizer's learning rate, unchanged
  std::unique_ptr<ModelEma> ema;       // empty: no EMA of the weights
  // How the ranks train together (parallel/strategy.h: ddp, zero1), or one process (single). The
  // Trainer asks it every question of the world (gradient sync, reductions, decisions, the optimizer
  // state to save) and sets it up first (zero1 replaces the optimizer by its sharded one).
  std::shared_ptr<parallel::Strategy> strategy;  // empty: single
};

class Trainer;

// Optimizer steps in an epoch of `batches` batches, `accumulate_steps` to a step (a last, shorter group
// steps too): the one computation, which the Trainer and the run plan (recipe/run_plan.h) both read.
inline int64_t optimizer_steps_per_epoch(int64_t batches, int64_t accumulate_steps) {
  return (batches + accumulate_steps - 1) / accumulate_steps;
}
class CudaGraphStep;
class GpuIdleMeter;

// Hooks into the loop. Each defaults to nothing.
class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_fit_start(Trainer&) {}
  virtual void on_epoch_start(Trainer&, int64_t /*epoch*/) {}
  // After the Trainer put the model in training mode (each epoch's start, and after each
  // evaluation): a callback may put parts of it back in eval mode (model.freeze's BatchNorm layers).
  virtual void on_model_train(Trainer&) {}
  virtual void on_train_step_end(Trainer&, const StepInfo&) {}
  virtual void on_validation_end(Trainer&, const EpochResult&) {}
  virtual void on_epoch_end(Trainer&, const EpochResult&) {}
  virtual void on_fit_end(Trainer&, const FitResult&) {}
};

class Trainer {
 public:
  // The Trainer owns its parts (moved in) and shares the sources with whoever made them: the
  // application may keep its own pointers (to read a loader's timing, say), and a source lives as
  // long as any holder. `eval` is optional: without it, epochs end without an evaluation (their
  // test results have samples == 0) and evaluate() is an error. Missing parts, empty sources and a
  // model not yet on options.device in the precision's parameter dtype are refused here with a
  // message saying what to do.
  Trainer(TrainerOptions options, TrainerParts parts, std::shared_ptr<data::BatchSource> train,
          std::shared_ptr<data::BatchSource> eval = nullptr);
  ~Trainer();

  void add_callback(std::shared_ptr<Callback> callback);

  // ---- the steps ----
  // The model under autocast (mixed precision) or on bf16 inputs (bf16-true).
  torch::Tensor forward(const torch::Tensor& input);
  // The loss part (cross-entropy by default), computed in float32.
  torch::Tensor compute_loss(const torch::Tensor& logits, const torch::Tensor& target);
  // Backpropagates `loss` divided by the number of batches accumulated into this optimizer step
  // (`accumulate` = 1: as it is), multiplied by the loss scale under fp16-mixed.
  void backward(const torch::Tensor& loss, int64_t accumulate = 1);
  // Sets the scheduled learning rate, unscales and clips the gradients, steps the optimizer (or
  // skips the step when the loss scaler found inf/NaN), updates the loss scale, clears gradients.
  void optimizer_step();
  // forward + loss + backward on one batch, and the optimizer update once the batch completes a group
  // of accumulate_steps batches (counted from the start of the epoch, by batch.index; the last group
  // of an epoch may be shorter). With options.cuda_graph on CUDA, the step is captured once and
  // replayed. Returns the detached loss.
  torch::Tensor train_step(const data::Batch& batch);

  EvalResult evaluate();
  // evaluate() with the EMA of the weights in the model (the model itself before the first
  // optimizer step); the model's own weights are restored afterwards. Needs an EMA part.
  EvalResult evaluate_ema();
  // Trains from state() to the last epoch, evaluating after each epoch.
  FitResult fit();
  // Asks fit() to stop after the current step (safe from a signal handler or another thread). Data
  // parallel: all ranks stop at the first step after it where they agree (Strategy::decision_due),
  // and early stopping (request_finish) is agreed at the end of the epoch.
  void request_stop() { stop_requested_.store(true); }
  // Asks fit() to end after the current epoch as a finished run, not an interrupted one (early
  // stopping).
  void request_finish() { finish_requested_.store(true); }
  bool finish_requested() const { return finish_requested_.load(); }

  // train.on_nonfinite: stop: reads the steps' inf/NaN flags kept since the last read and throws a
  // NonfiniteError naming the first non-finite step (fit() calls it at the logging interval, at the
  // end of each epoch and before every checkpoint).
  void check_finite();

  // Call after changing which of the optimizer's parameters require gradients (freezing or releasing
  // part of the model, trainer/freeze.h): the clipping and inf/NaN checks take the new set, the strategy
  // synchronises it (ddp: a new Reducer), and a captured CUDA graph (whose backward computed the old
  // set's gradients) is captured again.
  void trainable_changed();

  // ---- checkpoints ----
  // Refuses (NonfiniteError) to write a checkpoint after a non-finite step or of non-finite weights.
  // When the strategy's checkpoints are collective (zero1) every rank must call it at once (the optimizer
  // state is gathered on rank 0, which alone writes `path`; the others write nothing and may pass an
  // empty path).
  void save_checkpoint(const std::filesystem::path& path);
  // Restores model, optimizer, loss scaler, EMA, RNG state and state() from a checkpoint. Without
  // `optimizer_state` the optimizer keeps its fresh state (a run resumed with another optimizer.type).
  void load_checkpoint(const std::filesystem::path& path, bool optimizer_state = true);

  // ---- access ----
  const TrainerOptions& options() const { return options_; }
  TrainState& state() { return state_; }
  torch::nn::Module& module() { return *model_.ptr(); }
  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  torch::Device device() const { return options_.device; }
  GradScaler& scaler() { return *scaler_; }
  Precision precision() const { return options_.precision; }
  // What the precision settings mean here, for the log (the run applies them process-wide once:
  // TF32 on or off, see apply_global_precision; the Trainer itself changes no process-wide state).
  const std::string& precision_summary() const { return precision_summary_; }
  int64_t accumulate_steps() const { return options_.accumulate_steps; }
  // Optimizer steps per epoch (batches / accumulate_steps, rounded up).
  int64_t steps_per_epoch() const;
  int64_t total_steps() const { return steps_per_epoch() * options_.epochs; }
  // The EMA of the weights; nullptr without one.
  ModelEma* ema() { return ema_.get(); }
  // How the ranks train together (single when alone).
  parallel::Strategy& strategy() { return *strategy_; }
  // Whether training steps run as a replayed CUDA graph (after the warm-up steps).
  bool graph_active() const;
  // The learning rate for optimizer step `step` (0-based) under the schedule.
  double lr_at(int64_t step) const;
  // On CUDA: the share of GPU time idle between training steps since the last reading, measured with
  // CUDA events (trainer/gpu_idle.h); nothing on the CPU or before two steps have completed. Calls at
  // the same optimizer step get the same reading, so that several readers of a logging window (the
  // metrics log, data.autotune: continuous) see one value.
  std::optional<double> take_gpu_idle();

 private:
  // The one step function, eager and graphed: forward, loss, backward and, when `update`, the
  // optimizer update (unscale, clip, step, scale update). Returns the (attached) loss.
  torch::Tensor step_function(const torch::Tensor& input, const torch::Tensor& target, int64_t accumulate,
                              bool update);
  void apply_update();             // unscale, clip, optimizer step, loss-scale update
  void finish_optimizer_step();    // clear gradients (eager), count the step, update the EMA
  torch::Tensor eager_step(const data::Batch& batch, int64_t accumulate);
  // The step as a warm-up, capture or replay of the CUDA graph; nothing when it must run eagerly.
  std::optional<torch::Tensor> graphed_step(const data::Batch& batch);
  struct EpochTally;  // what an epoch adds up as it trains
  void train_epoch(int64_t epoch, EpochResult& result, bool& interrupted);
  void summarise_epoch(int64_t epoch, const EpochTally& tally, EpochResult& result);
  std::optional<data::Batch> next_batch();  // the training source's next batch, traced
  // Whether to stop after optimizer step `step`: the ranks' requests combined where the strategy
  // agrees on them (alone: every step; data parallel: every stop_check_every-th and at `epoch_end`),
  // false in between.
  bool stop_agreed(int64_t step, bool epoch_end);
  void train_mode();  // the model in training mode, then the callbacks' on_model_train
  std::vector<CheckpointPart> checkpoint_parts();
  void check_weights_finite();  // throws NonfiniteError when a weight (or its EMA) is inf/NaN
  void save_buffers();     // train.on_nonfinite: skip: the module's buffers before a step
  void restore_buffers();  // and back after a skipped one

  TrainerOptions options_;
  torch::nn::AnyModule model_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  LossFunction loss_;
  std::unique_ptr<GradScaler> scaler_;
  LrSchedule schedule_;
  std::unique_ptr<ModelEma> ema_;
  std::shared_ptr<parallel::Strategy> strategy_;
  std::shared_ptr<data::BatchSource> train_, eval_;
  std::unique_ptr<CudaGraphStep> graph_;
  std::unique_ptr<GpuIdleMeter> idle_;
  int64_t idle_read_step_ = -1;           // the step of the last take_gpu_idle() ...
  std::optional<double> idle_reading_;    // ... and what it read
  std::vector<std::shared_ptr<Callback>> callbacks_;
  // The optimizer's parameters that require gradients (ZeRO-1: this rank's pieces), for clipping and
  // the inf/NaN checks.
  std::vector<torch::Tensor> params_;
  TrainState state_;
  std::string precision_summary_;
  int64_t micro_batches_ = 0;  // batches backpropagated since the last optimizer step
  std::unique_ptr<NonfiniteWatch> watch_;
  StepPlace place_;  // the optimizer step in progress, for the inf/NaN reports
  std::vector<torch::Tensor> buffers_before_;  // see save_buffers()
  // Training samples counted right this epoch (on the device: no sync per step; a CUDA graph adds
  // to it in place when replayed).
  torch::Tensor train_correct_;
  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> finish_requested_{false};
};

}  // namespace stoker
