#include "trainer/trainer.h"

#include <cmath>
#include <optional>

#include <torch/torch.h>

#include "common/error.h"
#include "models/activation_checkpointing.h"
#include "optim/optim.h"
#include "common/trace.h"
#include "trainer/cuda_graph_step.h"
#include "trainer/gpu_idle.h"
#include "trainer/evaluate.h"
#include "common/log.h"

namespace stoker {
using trace::now_s;
namespace {

torch::Tensor cross_entropy(const torch::Tensor& logits, const torch::Tensor& target) {
  return cross_entropy_loss(logits, target, 0.0);  // class indices or soft targets
}

// Why the step cannot be a CUDA graph here, or nothing when it can.
std::string graph_obstacle(const TrainerOptions& o, torch::optim::Optimizer& optimizer,
                           const parallel::Strategy& strategy) {
  if (std::string why = strategy.graph_obstacle(); !why.empty()) return why;
  if (o.accumulate_steps != 1) return "it does not support gradient accumulation (train.accumulate_steps > 1)";
  if (o.nonfinite.on_nonfinite == OnNonfinite::kSkip) {
    return "train.on_nonfinite: skip decides on the host, step by step, whether to update (use stop)";
  }
  auto* amp = dynamic_cast<AmpStepOptimizer*>(&optimizer);
  if (amp == nullptr) {
    return "it needs one of Stoker's optimizers (stoker::make_optimizer) with optimizer.implementation: fused "
           "(or auto)";
  }
  return amp->capture_obstacle();
}

// Why `model`'s step cannot be a CUDA graph (nothing when it can): activation checkpointing recomputes
// blocks in backward with the random generators' state saved and restored on the host. The recipe
// refuses the pair; a Trainer built from parts by hand learns it here.
std::string checkpointing_obstacle(torch::nn::Module& model) {
  for (models::CheckpointableBlock* block : models::checkpointable_blocks(model)) {
    if (block->checkpointing()) {
      return "model.activation_checkpointing is on: its recomputation in backward saves and restores the random "
             "generators' state on the host, which a CUDA graph cannot capture (turn one of them off)";
    }
  }
  return "";
}

// The parts must arrive ready to train: the model on the device, in the precision's parameter dtype.
void check_model_placement(torch::nn::Module& model, const TrainerOptions& o) {
  const c10::ScalarType dtype = parameter_dtype(o.precision);
  for (const auto& item : model.named_parameters()) {
    const torch::Tensor& p = item.value();
    const bool on_device =
        p.device().type() == o.device.type() && (!o.device.has_index() || p.device().index() == o.device.index());
    STOKER_CHECK(on_device,
                 "Trainer: the model's parameter '{}' is on {} but TrainerOptions::device is {}; move the "
                 "model there before building the Trainer (stoker::prepare_model in trainer/precision.h does it)",
                 item.key(), p.device().str(), o.device.str());
    STOKER_CHECK(!p.is_floating_point() || p.scalar_type() == dtype,
                 "Trainer: the model's parameter '{}' is {} but precision {} trains {} parameters; convert "
                 "the model before building the Trainer (stoker::prepare_model in trainer/precision.h does it)",
                 item.key(), c10::toString(p.scalar_type()), precision_name(o.precision), c10::toString(dtype));
  }
}

// train.cuda_graph: the step captured once and replayed, with the hooks the optimizer and the loss
// scaler need; disabled (saying why) when the configuration cannot be captured.
std::unique_ptr<CudaGraphStep> make_graph_step(const TrainerOptions& options, torch::optim::Optimizer& optimizer,
                                               GradScaler& scaler, const parallel::Strategy& strategy,
                                               CudaGraphStep::StepFunction step) {
  CudaGraphStep::Hooks hooks;
  // Backward then allocates the gradients in the graph's pool, as static tensors of the graph; and
  // every parameter's optimizer state exists before the capture (made inside it, it would be a
  // node of the graph, re-zeroed at every replay).
  hooks.before_capture = [&optimizer] {
    if (auto* amp = dynamic_cast<AmpStepOptimizer*>(&optimizer)) amp->create_state();
    optimizer.zero_grad(/*set_to_none=*/true);
  };
  hooks.after_failure = [&optimizer, &scaler] {
    scaler.abandon_step();
    optimizer.zero_grad(/*set_to_none=*/true);
  };
  // A new input size (data.resolution_schedule) is captured again: the old graph's static gradients
  // hold its last replay's and would be added to by the first warm-up step.
  hooks.before_release = [&optimizer] { optimizer.zero_grad(/*set_to_none=*/true); };
  auto graph = std::make_unique<CudaGraphStep>(options.device, std::move(step), std::move(hooks));
  const std::string obstacle = graph_obstacle(options, optimizer, strategy);
  if (!obstacle.empty()) graph->disable(obstacle);
  return graph;
}

}  // namespace

// ---- set-up ---------------------------------------------------------------------------------------

Trainer::Trainer(TrainerOptions options, TrainerParts parts, std::shared_ptr<data::BatchSource> train,
                 std::shared_ptr<data::BatchSource> eval)
    : options_(std::move(options)),
      model_(std::move(parts.model)),
      optimizer_(std::move(parts.optimizer)),
      loss_(parts.loss ? std::move(parts.loss) : LossFunction(cross_entropy)),
      scaler_(std::move(parts.scaler)),
      schedule_(std::move(parts.schedule)),
      ema_(std::move(parts.ema)),
      strategy_(parts.strategy ? std::move(parts.strategy) : parallel::make_strategy("single", {})),
      train_(std::move(train)),
      eval_(std::move(eval)),
      idle_(std::make_unique<GpuIdleMeter>(options_.device)) {
  STOKER_CHECK(!model_.is_empty(), "Trainer: TrainerParts::model is empty; hand it the model to train");
  STOKER_CHECK(optimizer_ != nullptr,
               "Trainer: TrainerParts::optimizer is empty; hand it an optimizer over the model's parameters "
               "(stoker::make_optimizer in optim/optim.h, or any torch::optim::Optimizer)");
  STOKER_CHECK(train_ && train_->num_batches() > 0,
               "Trainer: the training source is {}; hand it a data::BatchSource with at least one batch",
               train_ ? "empty (0 batches)" : "missing");
  STOKER_CHECK(!eval_ || eval_->num_batches() > 0,
               "Trainer: the evaluation source is empty (0 batches); hand it a data::BatchSource with at least one "
               "batch, or none to train without evaluating");
  STOKER_CHECK(options_.accumulate_steps >= 1, "Trainer: TrainerOptions::accumulate_steps must be >= 1, got {}",
               options_.accumulate_steps);
  STOKER_CHECK(options_.precision != Precision::kAuto,
               "Trainer: TrainerOptions::precision is auto, a request the run resolves for its device; pick one "
               "with stoker::decide_precision (recipe/precision_trial.h) or name a precision");
  check_model_placement(module(), options_);
  watch_ = std::make_unique<NonfiniteWatch>(options_.nonfinite, options_.device);  // allocates on the device
  train_correct_ = torch::zeros({}, torch::TensorOptions().dtype(torch::kInt64).device(options_.device));
  precision_summary_ = describe_precision(options_.precision);  // the run applies it (apply_global_precision)
  if (!scaler_) scaler_ = std::make_unique<GradScaler>(GradScalerOptions().with_enabled(false), options_.device);
  strategy_->setup(model_.ptr(), optimizer_);  // zero1: the optimizer over this rank's pieces
  params_ = strategy_->stepped_parameters(*optimizer_);
  if (options_.cuda_graph) {
    graph_ = make_graph_step(options_, *optimizer_, *scaler_, *strategy_,
                             [this](const torch::Tensor& input, const torch::Tensor& target) {
                               return step_function(input, target, 1, /*update=*/true);
                             });
    if (const std::string why = checkpointing_obstacle(module()); !why.empty()) graph_->disable(why);
  }
}

Trainer::~Trainer() = default;

void Trainer::add_callback(std::shared_ptr<Callback> callback) {
  callbacks_.push_back(std::move(callback));
}

int64_t Trainer::steps_per_epoch() const {
  return optimizer_steps_per_epoch(train_->num_batches(), options_.accumulate_steps);
}

double Trainer::lr_at(int64_t step) const {
  if (schedule_) return schedule_(step);
  const auto& group = optimizer_->param_groups().front();
  return group.options().get_lr();
}

bool Trainer::graph_active() const { return graph_ && graph_->active(); }

void Trainer::trainable_changed() {
  strategy_->parameters_changed(module());
  params_ = strategy_->stepped_parameters(*optimizer_);
  if (graph_) graph_->recapture();
}

void Trainer::train_mode() {
  module().train();
  for (auto& cb : callbacks_) cb->on_model_train(*this);
}

std::optional<double> Trainer::take_gpu_idle() {
  if (idle_read_step_ != state_.step) {
    idle_read_step_ = state_.step;
    idle_reading_ = idle_->take_idle_share();
  }
  return idle_reading_;
}

// ---- the steps ------------------------------------------------------------------------------------

torch::Tensor Trainer::forward(const torch::Tensor& input) {
  return forward_in_precision(model_, input, options_.device, options_.precision);
}

torch::Tensor Trainer::compute_loss(const torch::Tensor& logits, const torch::Tensor& target) {
  // In float32 whatever the logits are (autocast does the same for cross_entropy).
  return loss_(logits.to(torch::kFloat32), target);
}

void Trainer::backward(const torch::Tensor& loss, int64_t accumulate) {
  // N accumulated batches of mean losses, each divided by N, sum to the mean over all N x B
  // samples: the same gradient as one batch N times larger.
  const torch::Tensor scaled = accumulate > 1 ? loss / static_cast<double>(accumulate) : loss;
  scaler_->scale(scaled).backward();
}

void Trainer::apply_update() {
  // A loss scaler looks for inf/NaN gradients itself (and skips those steps while it backs off).
  if (!scaler_->enabled()) watch_->note_gradients(params_);
  // Every rank skips (or stops at) the same steps, whichever saw the inf/NaN: the loss scalers, which
  // none of them updates at a skipped step, stay the same too.
  watch_->combine([this](torch::Tensor& flags) { strategy_->reduce_decision(flags); });
  if (watch_->skip_this_step(place_)) {  // train.on_nonfinite: skip, and this step was not finite
    restore_buffers();
    return;
  }
  if (options_.grad_clip_norm > 0) {
    scaler_->unscale(*optimizer_);  // clip the true gradients, not the scaled ones
    strategy_->clip_gradients(params_, options_.grad_clip_norm);
  }
  scaler_->step(*optimizer_);
  scaler_->update();
}

torch::Tensor Trainer::step_function(const torch::Tensor& input, const torch::Tensor& target, int64_t accumulate,
                                     bool update) {
  torch::Tensor logits;
  {
    trace::Scope traced("forward");
    logits = forward(input);
  }
  torch::Tensor loss = compute_loss(logits, target);
  watch_->note_loss(loss);
  {
    // Training top-1, against the dominant class of soft targets.
    torch::NoGradGuard no_grad;
    const torch::Tensor label = target.dim() == 2 ? target.argmax(1) : target;
    train_correct_.add_(logits.argmax(1).eq(label).sum());
  }
  // Data parallel: the batch that ends an optimizer step all-reduces the gradients (mean over the
  // ranks) while backward runs; accumulation batches keep theirs local (DDP's no_sync).
  strategy_->before_backward(/*sync=*/update);
  {
    trace::Scope traced("backward");
    backward(loss, accumulate);
    strategy_->after_backward(/*sync=*/update);
  }
  if (update) {
    trace::Scope traced("optimizer");
    apply_update();
  }
  return loss;
}

void Trainer::finish_optimizer_step() {
  // A replayed graph overwrites its static gradients; eager steps start from cleared ones (ZeRO-1's
  // in place: they are views into its buckets).
  strategy_->zero_grad(*optimizer_, /*keep_tensors=*/graph_active());
  micro_batches_ = 0;
  ++state_.step;
  if (ema_) ema_->update(module());
  watch_->end_step(place_);
  if (watch_->check_due(state_.step)) watch_->check();
}

void Trainer::optimizer_step() {
  place_ = StepPlace{state_.step + 1, state_.epoch, state_.batch_in_epoch, lr_at(state_.step)};
  set_learning_rate(*optimizer_, lr_at(state_.step));
  apply_update();
  finish_optimizer_step();
}

// train.on_nonfinite: skip: the forward passes of a skipped step must not leave inf/NaN in the
// buffers (BatchNorm's running statistics), so they are copied before the step's first batch (small
// next to the weights) and put back when it is skipped.
void Trainer::save_buffers() {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> buffers = module().buffers();
  buffers_before_.resize(buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (!buffers_before_[i].defined() || !buffers_before_[i].sizes().equals(buffers[i].sizes())) {
      buffers_before_[i] = torch::empty_like(buffers[i]);
    }
    buffers_before_[i].copy_(buffers[i]);
  }
}

void Trainer::restore_buffers() {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> buffers = module().buffers();
  if (buffers.size() != buffers_before_.size()) return;  // optimizer_step() called outside train_step
  for (size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_(buffers_before_[i]);
}

torch::Tensor Trainer::eager_step(const data::Batch& batch, int64_t accumulate) {
  if (graph_active() && micro_batches_ == 0) {
    // The graph's static gradients still hold the last replay's: zero them in place (they must stay
    // the same tensors for the next replay) so that this step does not add to them.
    for (auto& p : params_) {
      if (p.grad().defined()) p.mutable_grad().zero_();
    }
  }
  if (watch_->skipping() && micro_batches_ == 0) save_buffers();
  const bool last = ++micro_batches_ >= accumulate;
  if (last) set_learning_rate(*optimizer_, lr_at(state_.step));
  torch::Tensor loss = step_function(batch.input, batch.target, accumulate, last);
  if (last) finish_optimizer_step();
  return loss.detach();
}

std::optional<torch::Tensor> Trainer::graphed_step(const data::Batch& batch) {
  if (!graph_ || graph_->disabled()) return std::nullopt;
  if (options_.batch_size > 0 && batch.size() != options_.batch_size) {
    // A short batch (data.drop_last: false) has another shape: it is stepped eagerly.
    if (graph_->active()) {
      logger().debug("train.cuda_graph: batch {} has {} samples; stepping it eagerly", batch.index, batch.size());
    }
    return std::nullopt;
  }
  const bool captured_before = graph_->active();
  set_learning_rate(*optimizer_, lr_at(state_.step));  // the graph reads it from the device
  std::optional<torch::Tensor> loss = graph_->run(batch.input, batch.target);
  if (!loss) return std::nullopt;
  if (!captured_before && graph_->active()) {
    logger().info("train.cuda_graph: captured the training step at step {}; replaying it from now on", state_.step);
  }
  finish_optimizer_step();
  return loss;
}

torch::Tensor Trainer::train_step(const data::Batch& batch) {
  place_ = StepPlace{state_.step + 1, state_.epoch, batch.index, lr_at(state_.step)};
  if (std::optional<torch::Tensor> loss = graphed_step(batch)) return *loss;
  // The group of accumulate_steps batches this one belongs to; the epoch's last group may be shorter.
  const int64_t n = options_.accumulate_steps;
  const int64_t group_start = batch.index / n * n;
  const int64_t group = std::max<int64_t>(1, std::min(n, train_->num_batches() - group_start));
  return eager_step(batch, group);
}

// ---- the loop -------------------------------------------------------------------------------------

std::optional<data::Batch> Trainer::next_batch() {
  trace::Scope traced("next batch");
  return train_->next();
}

// What an epoch adds up as it trains, for its EpochResult (summarise_epoch).
struct Trainer::EpochTally {
  double start = 0;
  // The mean training loss is over the batches whose loss was finite (train.on_nonfinite: skip).
  torch::Tensor loss_sum, loss_count;
  int64_t samples = 0;       // this rank's
  double data_seconds = 0;
  uint64_t step_digest = 0;  // of the batches since the last optimizer step
};

// Trains on the rest of epoch `epoch` (all of it, unless resuming mid-epoch) and fills the training
// half of `er`; sets `interrupted` when a stop was requested at an optimizer-step boundary.
void Trainer::train_epoch(int64_t epoch, EpochResult& er, bool& interrupted) {
  const int64_t batches = train_->num_batches();
  EpochTally tally;
  tally.start = now_s();
  tally.loss_sum = torch::zeros({}, torch::TensorOptions().device(options_.device));
  tally.loss_count = torch::zeros({}, torch::TensorOptions().device(options_.device));
  idle_->new_epoch();
  train_correct_.zero_();
  while (true) {
    const double t0 = now_s();
    const std::optional<data::Batch> batch = next_batch();
    if (!batch) break;
    // The batch operations' time (mixup, erasing: device work issued on this thread) is step time,
    // not data wait: more loader workers would not shorten it.
    const double t1 = now_s() - batch->ops_seconds;
    StepInfo info;
    info.lr = lr_at(state_.step);
    const int64_t steps_before = state_.step;
    idle_->step_begin();
    // The global batch's loss: the mean over the ranks' (data parallel), as one process logs it.
    info.loss = strategy_->mean(train_step(*batch));
    idle_->step_end();
    info.optimizer_step = state_.step != steps_before;
    // Resume points are optimizer-step boundaries: gradients of a partial group are not saved.
    if (info.optimizer_step) state_.batch_in_epoch = batch->index + 1;
    tally.loss_sum += info.loss.nan_to_num(0.0, 0.0, 0.0);
    tally.loss_count += info.loss.isfinite();
    tally.samples += batch->size();
    tally.data_seconds += t1 - t0;
    info.epoch = epoch;
    info.batch = batch->index;
    info.batches = batches;
    info.step = state_.step;
    info.samples = batch->size();
    info.data_seconds = t1 - t0;
    info.step_seconds = now_s() - t0;
    info.samples_digest = (tally.step_digest ^= batch->digest);
    if (info.optimizer_step) tally.step_digest = 0;
    for (auto& cb : callbacks_) cb->on_train_step_end(*this, info);
    if (info.optimizer_step && state_.batch_in_epoch < batches && stop_agreed(state_.step, false)) {
      interrupted = true;
      return;
    }
  }
  summarise_epoch(epoch, tally, er);
}

void Trainer::summarise_epoch(int64_t epoch, const EpochTally& tally, EpochResult& er) {
  watch_->check();  // before anything evaluates or saves the weights
  const double seconds = now_s() - tally.start;
  er.epoch = epoch;
  er.nonfinite_skips = watch_->take_skips();
  const double counted = tally.loss_count.item<double>();
  er.train_loss = counted > 0 ? tally.loss_sum.item<double>() / counted : NAN;  // of the global batches' losses
  // The training top-1 over every rank's samples, as one process counts it.
  std::vector<double> top1 = {train_correct_.item<double>(), static_cast<double>(tally.samples)};
  strategy_->sum(top1);
  er.train_top1 = top1[1] > 0 ? top1[0] / top1[1] : NAN;
  er.samples_per_s = seconds > 0 ? static_cast<double>(tally.samples) / seconds : 0;
  er.data_wait = seconds > 0 ? tally.data_seconds / seconds : 0;
  er.stages = train_->take_times();
  if (scaler_->enabled()) {
    er.loss_scale = scaler_->scale_value();
    er.skipped_steps = scaler_->skipped_steps();
  }
}

FitResult Trainer::fit() {
  FitResult result;
  const double fit_start = now_s();
  STOKER_CHECK(state_.batch_in_epoch >= 0 && state_.batch_in_epoch <= train_->num_batches(),
               "cannot continue at batch {} of an epoch of {} batches; the checkpoint was made with "
               "another data.batch_size or data set",
               state_.batch_in_epoch, train_->num_batches());
  for (auto& cb : callbacks_) cb->on_fit_start(*this);
  while (state_.epoch < options_.epochs && !result.interrupted) {
    if (stop_agreed(state_.step, /*epoch_end=*/false)) {  // a stop requested before the epoch
      result.interrupted = true;
      break;
    }
    const int64_t epoch = state_.epoch;
    train_->take_times();  // before the workers start on this epoch: its times start from zero
    train_->start_epoch(epoch, state_.batch_in_epoch);
    train_mode();
    for (auto& cb : callbacks_) cb->on_epoch_start(*this, epoch);
    const double epoch_start = now_s();
    EpochResult er;
    train_epoch(epoch, er, result.interrupted);
    if (result.interrupted) break;
    if (eval_) {  // without an evaluation source, epochs end without one (test.samples == 0)
      er.test = evaluate();
      if (ema_) er.ema_test = evaluate_ema();
    }
    er.seconds = now_s() - epoch_start;
    for (auto& cb : callbacks_) cb->on_validation_end(*this, er);
    state_.epoch = epoch + 1;
    state_.batch_in_epoch = 0;
    for (auto& cb : callbacks_) cb->on_epoch_end(*this, er);
    result.epochs.push_back(er);
    if (state_.epoch >= options_.epochs) break;
    const bool stop = stop_agreed(state_.step, /*epoch_end=*/true);  // agrees on finish_requested_ too
    result.stopped_early = finish_requested_.load();
    result.interrupted = stop && !result.stopped_early;
    if (result.stopped_early) break;
  }
  result.seconds = now_s() - fit_start;
  for (auto& cb : callbacks_) cb->on_fit_end(*this, result);
  return result;
}

bool Trainer::stop_agreed(int64_t step, bool epoch_end) {
  if (!epoch_end && !strategy_->decision_due(step)) return false;
  // At the end of an epoch, early stopping too: each rank decided on the same all-reduced evaluation,
  // but one that did not must not train on alone.
  const std::vector<bool> agreed = strategy_->any({stop_requested_.load(), epoch_end && finish_requested_.load()});
  if (agreed[1]) finish_requested_.store(true);
  if (agreed[0]) stop_requested_.store(true);
  return agreed[0];
}

// The checkpoints (save_checkpoint, load_checkpoint) are trainer_checkpoint.cpp's.

}  // namespace stoker
