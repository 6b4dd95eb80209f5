#include "trainer/trainer.h"

#include <chrono>
#include <cmath>
#include <optional>

#include <torch/torch.h>

#include "common/error.h"
#include "trainer/evaluate.h"
#include "trainer/logging.h"
#include "optim/optim.h"
#include "trainer/sizing.h"

#ifdef STOKER_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace stoker {
namespace {

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// Converts every 4-D parameter and buffer to channels-last in place.
void to_channels_last(torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  for (auto& p : model.parameters()) {
    if (p.dim() == 4) p.set_data(p.data().contiguous(torch::MemoryFormat::ChannelsLast));
  }
}

}  // namespace

// ---- set-up ---------------------------------------------------------------------------------------

Trainer::Trainer(Config config, torch::nn::AnyModule model,
                 std::shared_ptr<data::Loader> train,
                 std::shared_ptr<data::Loader> test, torch::Device device)
    : config_(std::move(config)),
      model_(std::move(model)),
      train_(std::move(train)),
      test_(std::move(test)),
      device_(device) {
  STOKER_CHECK(!model_.is_empty(), "Trainer needs a model");
  STOKER_CHECK(train_ && train_->num_batches() > 0, "Trainer needs a training loader with batches");
  STOKER_CHECK(test_ && test_->num_batches() > 0, "Trainer needs an evaluation loader with batches");
  precision_ = parse_precision(config_.train.precision);
  precision_summary_ = apply_global_precision(precision_);
  accumulate_ = accumulate_steps_of(config_);
  module().to(device_, parameter_dtype(precision_));
  if (config_.train.channels_last) to_channels_last(module());

  sizing_warnings_ = check_sizes(module(), config_.data.batch_size, train_->channels(),
                                 config_.data.num_classes);
  if (config_.train.strict_sizes && !sizing_warnings_.empty()) {
    std::string all;
    for (const auto& w : sizing_warnings_) all += "\n  " + w;
    STOKER_FAIL("train.strict_sizes is on and {} size(s) are not tensor-core friendly:{}\nchange them, "
                "or set train.strict_sizes: false to train anyway",
                sizing_warnings_.size(), all);
  }

  optimizer_ = make_optimizer(config_.optimizer, module(), device_);
  for (const auto& p : module().parameters()) {
    if (p.requires_grad()) params_.push_back(p);
  }
  const LossScaleOptions& ls = config_.train.loss_scale;
  scaler_ = std::make_unique<GradScaler>(GradScalerOptions()
                                             .with_init_scale(ls.init_scale)
                                             .with_growth_factor(ls.growth_factor)
                                             .with_backoff_factor(ls.backoff_factor)
                                             .with_growth_interval(ls.growth_interval)
                                             .with_enabled(needs_loss_scaling(precision_)),
                                         device_);
}

void Trainer::add_callback(std::shared_ptr<Callback> callback) {
  callbacks_.push_back(std::move(callback));
}

double Trainer::lr_at(int64_t step) const {
  return scheduled_lr(config_.schedule, effective_lr(config_), step, steps_per_epoch(), config_.train.epochs);
}

// ---- the steps ------------------------------------------------------------------------------------

torch::Tensor Trainer::forward(const torch::Tensor& input) {
  AutocastGuard autocast(device_, precision_);
  if (precision_ == Precision::kBf16True && input.scalar_type() != torch::kBFloat16) {
    return model_.forward(input.to(torch::kBFloat16));
  }
  return model_.forward(input);
}

torch::Tensor Trainer::compute_loss(const torch::Tensor& logits, const torch::Tensor& target) {
  namespace F = torch::nn::functional;
  // In float32 whatever the logits are (autocast does the same for cross_entropy).
  return F::cross_entropy(logits.to(torch::kFloat32), target,
                          F::CrossEntropyFuncOptions().label_smoothing(config_.train.label_smoothing));
}

void Trainer::backward(const torch::Tensor& loss, int64_t accumulate) {
  // N accumulated batches of mean losses, each divided by N, sum to the mean over all N x B
  // samples: the same gradient as one batch N times larger.
  const torch::Tensor scaled = accumulate > 1 ? loss / static_cast<double>(accumulate) : loss;
  scaler_->scale(scaled).backward();
}

void Trainer::optimizer_step() {
  set_learning_rate(*optimizer_, lr_at(state_.step));
  if (config_.train.grad_clip_norm > 0) {
    scaler_->unscale(*optimizer_);  // clip the true gradients, not the scaled ones
    clip_grad_norm(params_, config_.train.grad_clip_norm);
  }
  scaler_->step(*optimizer_);
  scaler_->update();
  if (!graph_active()) optimizer_->zero_grad();
  micro_batches_ = 0;
  ++state_.step;
  if (ema_) ema_->update(module());
}

torch::Tensor Trainer::eager_step(const data::Batch& batch, int64_t accumulate) {
  torch::Tensor logits = forward(batch.input);
  torch::Tensor loss = compute_loss(logits, batch.target);
  backward(loss, accumulate);
  if (++micro_batches_ >= accumulate) optimizer_step();
  return loss.detach();
}

torch::Tensor Trainer::train_step(const data::Batch& batch) {
  // The group of `accumulate_` batches this one belongs to; the epoch's last group may be shorter.
  const int64_t batches = train_->num_batches();
  const int64_t group_start = batch.index / accumulate_ * accumulate_;
  const int64_t group = std::max<int64_t>(1, std::min(accumulate_, batches - group_start));
  if (config_.train.cuda_graph) {
    if (std::optional<torch::Tensor> loss = graphed_step(batch)) return *loss;
  }
  return eager_step(batch, group);
}

// ---- the CUDA graph of a whole step -----------------------------------------------------------------
// After `kWarmup` eager steps on a side stream (cuDNN/cuBLAS pick their algorithms and workspaces,
// autograd and the optimizer create their state), one step (forward, loss, backward, unscale,
// clip, optimizer, loss-scale update) is captured into a CUDA graph with static input and target
// buffers; every later step copies the batch into those buffers (a device-to-device copy of the
// prefetched batch, microseconds) and replays the graph: one launch instead of hundreds. The
// learning rate lives in a device tensor that is set before each replay. Anything that cannot be
// captured (a host synchronisation, a partial batch, accumulation) falls back to eager steps with a
// message saying why.

#ifdef STOKER_WITH_CUDA
struct Trainer::GraphedStep {
  static constexpr int kWarmup = 3;
  int warmup_done = 0;
  bool active = false;    // captured: replay from now on
  bool disabled = false;  // fell back to eager steps for good
  std::optional<at::cuda::CUDAStream> side;
  std::unique_ptr<at::cuda::CUDAGraph> graph;  // made at capture time (its constructor needs CUDA)
  torch::Tensor input, target, loss;
};

std::optional<torch::Tensor> Trainer::graphed_step(const data::Batch& batch) {
  if (!graph_) {
    graph_ = std::make_unique<GraphedStep>();
    std::string why;
    if (!device_.is_cuda()) why = "it needs a CUDA device";
    else if (accumulate_ != 1) why = "it does not support gradient accumulation (train.accumulate_steps > 1)";
    else if (resolve_optimizer_impl(config_.optimizer.implementation, device_) != OptimizerImpl::kFused)
      why = "it needs optimizer.implementation: fused (or auto)";
    if (!why.empty()) {
      logger().warn("train.cuda_graph: training eagerly because {}", why);
      graph_->disabled = true;
    }
  }
  GraphedStep& g = *graph_;
  if (g.disabled) return std::nullopt;
  if (batch.size() != config_.data.batch_size) {
    // A short batch (data.drop_last: false) has another shape: run it eagerly.
    if (g.active) {
      logger().debug("train.cuda_graph: batch {} has {} samples; stepping it eagerly", batch.index,
                     batch.size());
    }
    return std::nullopt;
  }
  const at::cuda::CUDAStream ambient = at::cuda::getCurrentCUDAStream(device_.index());
  if (!g.side) g.side = at::cuda::getStreamFromPool(false, device_.index());
  auto order = [](const at::cuda::CUDAStream& first, const at::cuda::CUDAStream& then) {
    at::cuda::CUDAEvent event;
    event.record(first);
    event.block(then);
  };

  if (!g.active && g.warmup_done < GraphedStep::kWarmup) {
    // Warm-up steps run eagerly on the side stream, where the capture will run.
    order(ambient, *g.side);
    torch::Tensor loss;
    {
      c10::cuda::CUDAStreamGuard on_side(*g.side);
      loss = eager_step(batch, 1);
    }
    order(*g.side, ambient);
    ++g.warmup_done;
    return loss;
  }

  if (!g.active) {
    try {
      g.input = batch.input.clone();
      g.target = batch.target.clone();
      set_learning_rate(*optimizer_, lr_at(state_.step));  // the graph reads it from the device
      optimizer_->zero_grad(/*set_to_none=*/true);  // backward allocates them in the graph's pool
      c10::cuda::device_synchronize();
      {
        c10::cuda::CUDAStreamGuard on_side(*g.side);
        g.graph = std::make_unique<at::cuda::CUDAGraph>();
        g.graph->capture_begin();
        g.loss = compute_loss(forward(g.input), g.target);
        backward(g.loss, 1);
        if (config_.train.grad_clip_norm > 0) {
          scaler_->unscale(*optimizer_);
          clip_grad_norm(params_, config_.train.grad_clip_norm);
        }
        scaler_->step(*optimizer_);
        scaler_->update();
        g.graph->capture_end();
      }
      c10::cuda::device_synchronize();
      g.active = true;
      logger().info("train.cuda_graph: captured the training step at step {}; replaying it from now on",
                    state_.step);
    } catch (const std::exception& e) {
      // End a capture left open by the failure, so that the stream is usable again.
      cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
      if (cudaStreamIsCapturing(g.side->stream(), &status) == cudaSuccess &&
          status != cudaStreamCaptureStatusNone) {
        cudaGraph_t broken = nullptr;
        cudaStreamEndCapture(g.side->stream(), &broken);
        if (broken != nullptr) cudaGraphDestroy(broken);
      }
      (void)cudaGetLastError();
      std::string why = e.what();
      logger().warn("train.cuda_graph: the training step could not be captured ({}); training eagerly",
                    why.substr(0, why.find('\n')));
      g.disabled = true;
      scaler_->abandon_step();
      optimizer_->zero_grad(/*set_to_none=*/true);
      return std::nullopt;
    }
    // The capture recorded the work without doing it: the replay below trains on this batch.
  }

  set_learning_rate(*optimizer_, lr_at(state_.step));
  g.input.copy_(batch.input, /*non_blocking=*/true);
  g.target.copy_(batch.target, /*non_blocking=*/true);
  g.graph->replay();
  micro_batches_ = 0;
  ++state_.step;
  if (ema_) ema_->update(module());
  return g.loss.detach().clone();
}
#else
struct Trainer::GraphedStep {};
std::optional<torch::Tensor> Trainer::graphed_step(const data::Batch&) {
  if (!graph_) {
    graph_ = std::make_unique<GraphedStep>();
    logger().warn("train.cuda_graph: training eagerly because this build of Stoker has no CUDA parts");
  }
  return std::nullopt;
}
#endif

bool Trainer::graph_active() const {
#ifdef STOKER_WITH_CUDA
  return graph_ && graph_->active;
#else
  return false;
#endif
}

Trainer::~Trainer() = default;

EvalResult Trainer::evaluate() {
  module().eval();
  const EvalResult result = evaluate_model([this](const torch::Tensor& x) { return forward(x); }, *test_);
  test_->take_times();  // evaluation's data times are not the training epoch's
  module().train();
  return result;
}

EvalResult Trainer::evaluate_ema() {
  STOKER_CHECK(ema_ != nullptr, "evaluate_ema() needs an EMA of the weights; set train.ema_decay");
  EmaWeightsInModel swap(*ema_, module());
  return evaluate();
}

// ---- the loop -------------------------------------------------------------------------------------

FitResult Trainer::fit() {
  FitResult result;
  const double fit_start = now_s();
  const int64_t batches = train_->num_batches();
  STOKER_CHECK(state_.batch_in_epoch >= 0 && state_.batch_in_epoch <= batches,
               "cannot continue at batch {} of an epoch of {} batches; the checkpoint was made with "
               "another data.batch_size or data set",
               state_.batch_in_epoch, batches);
  for (auto& cb : callbacks_) cb->on_fit_start(*this);

  while (state_.epoch < config_.train.epochs) {
    if (stop_requested_.load()) {
      result.interrupted = true;
      break;
    }
    const int64_t epoch = state_.epoch;
    train_->take_times();  // before the workers start on this epoch: its times start from zero
    train_->start_epoch(epoch, state_.batch_in_epoch);
    module().train();
    for (auto& cb : callbacks_) cb->on_epoch_start(*this, epoch);

    // Train on the rest of the epoch (all of it, unless resuming mid-epoch).
    const double epoch_start = now_s();
    torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().device(device_));
    int64_t loss_count = 0, samples = 0;
    double data_seconds = 0;
    while (true) {
      const double t0 = now_s();
      std::optional<data::Batch> batch = train_->next();
      const double t1 = now_s();
      if (!batch) break;
      StepInfo info;
      info.lr = lr_at(state_.step);
      const int64_t steps_before = state_.step;
      info.loss = train_step(*batch);
      info.optimizer_step = state_.step != steps_before;
      // Resume points are optimizer-step boundaries: gradients of a partial group are not saved.
      if (info.optimizer_step) state_.batch_in_epoch = batch->index + 1;
      loss_sum += info.loss;
      ++loss_count;
      samples += batch->size();
      data_seconds += t1 - t0;

      info.epoch = epoch;
      info.batch = batch->index;
      info.batches = batches;
      info.step = state_.step;
      info.samples = batch->size();
      info.data_seconds = t1 - t0;
      info.step_seconds = now_s() - t0;
      for (auto& cb : callbacks_) cb->on_train_step_end(*this, info);
      if (stop_requested_.load() && info.optimizer_step && state_.batch_in_epoch < batches) {
        result.interrupted = true;
        break;
      }
    }
    if (result.interrupted) break;
    const double train_seconds = now_s() - epoch_start;

    EpochResult er;
    er.epoch = epoch;
    er.train_loss = loss_count ? loss_sum.item<double>() / static_cast<double>(loss_count) : NAN;
    er.samples_per_s = train_seconds > 0 ? static_cast<double>(samples) / train_seconds : 0;
    er.data_wait = train_seconds > 0 ? data_seconds / train_seconds : 0;
    er.stages = train_->take_times();
    if (scaler_->enabled()) {
      er.loss_scale = scaler_->scale_value();
      er.skipped_steps = scaler_->skipped_steps();
    }
    er.test = evaluate();
    if (ema_) er.ema_test = evaluate_ema();
    er.seconds = now_s() - epoch_start;
    for (auto& cb : callbacks_) cb->on_validation_end(*this, er);
    state_.epoch = epoch + 1;
    state_.batch_in_epoch = 0;
    for (auto& cb : callbacks_) cb->on_epoch_end(*this, er);
    result.epochs.push_back(er);
    if (finish_requested_.load() && state_.epoch < config_.train.epochs) {
      result.stopped_early = true;
      break;
    }
  }
  result.seconds = now_s() - fit_start;
  for (auto& cb : callbacks_) cb->on_fit_end(*this, result);
  return result;
}

// ---- checkpoints ----------------------------------------------------------------------------------

std::vector<CheckpointPart> Trainer::checkpoint_parts() {
  std::vector<CheckpointPart> parts;
  if (scaler_->enabled()) {
    parts.push_back({"loss_scaler",
                     [this](torch::serialize::OutputArchive& a) { scaler_->save(a); },
                     [this](torch::serialize::InputArchive& a) { scaler_->load(a); }});
  }
  return parts;
}

void Trainer::save_checkpoint(const std::filesystem::path& path) {
  CheckpointContent content;
  content.state = state_;
  content.config_yaml = config_to_yaml(config_);
  if (ema_) {
    content.ema = ema_->named_tensors();
    content.ema_updates = ema_->updates();
  }
  stoker::save_checkpoint(path, module(), *optimizer_, content, checkpoint_parts());
}

void Trainer::load_checkpoint(const std::filesystem::path& path) {
  const CheckpointContent content =
      stoker::load_checkpoint(path, module(), optimizer_.get(), device_, checkpoint_parts());
  STOKER_CHECK(content.state.batch_in_epoch <= train_->num_batches(),
               "checkpoint {} stopped at batch {} of an epoch, but epochs now have {} batches; resume "
               "with the data.batch_size and data set the run was started with",
               path.string(), content.state.batch_in_epoch, train_->num_batches());
  state_ = content.state;
  // A checkpoint without an EMA (train.ema_decay was 0) starts one from the weights at the next step.
  if (ema_ && !content.ema.empty()) ema_->load(content.ema, content.ema_updates, module(), path.string());
}

}  // namespace stoker
