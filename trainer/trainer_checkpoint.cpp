// The Trainer's checkpoints (trainer/trainer.h): what it writes beside the weights and optimizer state
// (the loss scaler's state, the position, the EMA, the config, the class names) and how it restores
// them, refusing to write one after an inf/NaN step. The file format is trainer/checkpoint.h's.
#include "trainer/trainer.h"

#include "common/error.h"
#include "common/log.h"
#include "optim/optim.h"
#include "trainer/cuda_graph_step.h"

namespace stoker {

std::vector<CheckpointPart> Trainer::checkpoint_parts() {
  std::vector<CheckpointPart> parts;
  if (scaler_->enabled()) {
    parts.push_back({"loss_scaler",
                     [this](torch::serialize::OutputArchive& a) { scaler_->save(a); },
                     [this](torch::serialize::InputArchive& a) { scaler_->load(a); }});
  }
  return parts;
}

void Trainer::check_finite() { watch_->check(); }

void Trainer::check_weights_finite() {
  std::vector<torch::Tensor> weights = module().parameters();
  if (ema_) {
    for (const auto& [name, tensor] : ema_->named_tensors()) weights.push_back(tensor);
  }
  if (nonfinite_flag(weights, options_.device).item<float>() == 0) return;
  // The last step taken did it (its losses and gradients were finite, or check_finite had thrown).
  const StepPlace here = place_.step == state_.step
                             ? place_
                             : StepPlace{state_.step, state_.epoch, state_.batch_in_epoch, lr_at(state_.step)};
  throw NonfiniteError(fmt::format("the weights{} became inf or NaN at step {} (epoch {}, batch {}) with learning "
                                   "rate {:g}: its update overflowed, although its loss and gradients were finite",
                                   ema_ ? " (or their EMA)" : "", here.step, here.epoch + 1, here.batch + 1, here.lr),
                       "the weights", here, 0);
}

void Trainer::save_checkpoint(const std::filesystem::path& path) {
  check_finite();
  check_weights_finite();
  if (!strategy_->prepare_checkpoint(*optimizer_)) return;  // zero1: rank 0 writes, this rank's state too
  STOKER_CHECK(!path.empty(), "Trainer::save_checkpoint: no path to write the checkpoint to");
  CheckpointContent content;
  content.state = state_;
  content.state.world_size = strategy_->world_size();
  content.state.batch_size = options_.batch_size;
  content.state.accumulate_steps = options_.accumulate_steps;
  content.config_yaml = options_.config_yaml;
  content.class_names = options_.class_names;
  if (ema_) {
    content.ema = ema_->named_tensors();
    content.ema_updates = ema_->updates();
  }
  stoker::save_checkpoint(path, module(), *optimizer_, content, checkpoint_parts());
}

void Trainer::load_checkpoint(const std::filesystem::path& path, bool optimizer_state) {
  CheckpointContent content = stoker::load_checkpoint(
      path, module(), optimizer_state ? optimizer_.get() : nullptr, options_.device, checkpoint_parts());
  // Stopped on N ranks, resumed on M: the same samples follow (the global batch is cut the same way).
  content.state.batch_in_epoch =
      resumed_batch_in_epoch(content.state, strategy_->world_size(), options_.batch_size,
                             options_.accumulate_steps, path.string());
  STOKER_CHECK(content.state.batch_in_epoch <= train_->num_batches(),
               "checkpoint {} stopped at batch {} of an epoch, but epochs now have {} batches; resume "
               "with the data.batch_size and data set the run was started with",
               path.string(), content.state.batch_in_epoch, train_->num_batches());
  state_ = content.state;
  strategy_->generators_restored();  // the checkpoint's are rank 0's: every other rank draws its own again
  match_state_layout(*optimizer_);  // the run may be resumed with train.channels_last toggled
  // A captured step reads the optimizer state, the loss scale and the gradients it held at capture
  // time; loading replaced some of them (issue 33, G27): the next step captures again.
  if (graph_) graph_->recapture(fmt::format("loaded the checkpoint {}", path.string()));
  // A checkpoint without an EMA (train.ema_decay was 0) starts one from the weights at the next step.
  if (ema_ && !content.ema.empty()) ema_->load(content.ema, content.ema_updates, module(), path.string());
}

}  // namespace stoker
