#include "trainer/trainer.h"

#include <chrono>
#include <cmath>
#include <optional>

#include <torch/torch.h>

#include "common/error.h"
#include "trainer/evaluate.h"

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

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerOptions& o,
                                                        torch::nn::Module& model) {
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& p : model.parameters()) {
    if (!p.requires_grad()) continue;
    (p.dim() <= 1 && !o.decay_norm_and_bias ? no_decay : decay).push_back(p);
  }
  STOKER_CHECK(!decay.empty() || !no_decay.empty(), "the model has no trainable parameters");
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (o.type == "sgd") {
    auto options = [&](double wd) {
      return torch::optim::SGDOptions(o.lr).momentum(o.momentum).nesterov(o.nesterov).weight_decay(wd);
    };
    if (!decay.empty()) groups.emplace_back(decay, std::make_unique<torch::optim::SGDOptions>(options(o.weight_decay)));
    if (!no_decay.empty()) groups.emplace_back(no_decay, std::make_unique<torch::optim::SGDOptions>(options(0.0)));
    return std::make_unique<torch::optim::SGD>(groups, options(o.weight_decay));
  }
  if (o.type == "adamw") {
    auto options = [&](double wd) {
      return torch::optim::AdamWOptions(o.lr).betas({o.betas[0], o.betas[1]}).eps(o.eps).weight_decay(wd);
    };
    if (!decay.empty()) groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(options(o.weight_decay)));
    if (!no_decay.empty()) groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(options(0.0)));
    return std::make_unique<torch::optim::AdamW>(groups, options(o.weight_decay));
  }
  STOKER_FAIL("optimizer.type '{}' is not known; use sgd or adamw", o.type);
}

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
  module().to(device_);
  if (config_.train.channels_last) to_channels_last(module());
  optimizer_ = make_optimizer(config_.optimizer, module());
}

void Trainer::add_callback(std::shared_ptr<Callback> callback) {
  callbacks_.push_back(std::move(callback));
}

double Trainer::lr_at(int64_t step) const {
  return scheduled_lr(config_.schedule, effective_lr(config_), step, steps_per_epoch(), config_.train.epochs);
}

// ---- the steps ------------------------------------------------------------------------------------

torch::Tensor Trainer::forward(const torch::Tensor& input) { return model_.forward(input); }

torch::Tensor Trainer::compute_loss(const torch::Tensor& logits, const torch::Tensor& target) {
  namespace F = torch::nn::functional;
  return F::cross_entropy(logits, target,
                          F::CrossEntropyFuncOptions().label_smoothing(config_.train.label_smoothing));
}

void Trainer::backward(const torch::Tensor& loss) { loss.backward(); }

void Trainer::optimizer_step() {
  const double lr = lr_at(state_.step);
  for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr);
  if (config_.train.grad_clip_norm > 0) {
    torch::nn::utils::clip_grad_norm_(module().parameters(), config_.train.grad_clip_norm);
  }
  optimizer_->step();
  optimizer_->zero_grad();
  ++state_.step;
  if (ema_) ema_->update(module());
}

torch::Tensor Trainer::train_step(const data::Batch& batch) {
  torch::Tensor logits = forward(batch.input);
  torch::Tensor loss = compute_loss(logits, batch.target);
  backward(loss);
  optimizer_step();
  return loss.detach();
}

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
  const int64_t batches = steps_per_epoch();
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
      info.loss = train_step(*batch);
      state_.batch_in_epoch = batch->index + 1;
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
      if (stop_requested_.load() && state_.batch_in_epoch < batches) {
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

void Trainer::save_checkpoint(const std::filesystem::path& path) {
  CheckpointContent content;
  content.state = state_;
  content.config_yaml = config_to_yaml(config_);
  if (ema_) {
    content.ema = ema_->named_tensors();
    content.ema_updates = ema_->updates();
  }
  stoker::save_checkpoint(path, module(), *optimizer_, content);
}

void Trainer::load_checkpoint(const std::filesystem::path& path) {
  const CheckpointContent content = stoker::load_checkpoint(path, module(), optimizer_.get(), device_);
  STOKER_CHECK(content.state.batch_in_epoch <= steps_per_epoch(),
               "checkpoint {} stopped at batch {} of an epoch, but epochs now have {} batches; resume "
               "with the data.batch_size and data set the run was started with",
               path.string(), content.state.batch_in_epoch, steps_per_epoch());
  state_ = content.state;
  // A checkpoint without an EMA (train.ema_decay was 0) starts one from the weights at the next step.
  if (ema_ && !content.ema.empty()) ema_->load(content.ema, content.ema_updates, module(), path.string());
}

}  // namespace stoker
