#include "recipe/parts.h"

#include "common/error.h"
#include "optim/optim.h"
#include "optim/schedule.h"
#include "recipe/param_groups.h"
#include "trainer/freeze.h"

namespace stoker {

models::ModelShape model_shape(const Config& config, const data::InputShape& input) {
  return {input.channels, config.data.num_classes, input.height, input.width};
}

torch::nn::AnyModule make_model(const Config& config, const data::InputShape& input) {
  torch::nn::AnyModule model = models::create_model(config.model, model_shape(config, input));
  try {
    models::apply_activation_checkpointing(*model.ptr(), config.activation_checkpointing, config.model.type());
  } catch (const Error& e) {
    STOKER_FAIL("model.{}", e.what());  // the config's key
  }
  return model;
}

TrainerOptions trainer_options(const RunPlan& plan) {
  const Config& config = plan.config;
  TrainerOptions o;
  o.epochs = config.train.epochs;
  o.precision = config.train.precision;
  o.accumulate_steps = plan.batches.accumulate_steps;
  o.batch_size = config.data.batch_size;
  o.grad_clip_norm = config.train.grad_clip_norm;
  o.cuda_graph = config.train.cuda_graph;
  o.device = plan.device;
  o.nonfinite = NonfiniteOptions()
                    .set_on_nonfinite(config.train.on_nonfinite)
                    .set_max_skips(config.train.max_nonfinite_skips)
                    .set_check_every_steps(config.train.log_every_steps);
  o.config_yaml = plan.yaml;
  return o;
}

TrainerParts make_parts(const RunPlan& plan, torch::nn::AnyModule model) {
  const Config& config = plan.config;
  const Precision precision = config.train.precision;
  prepare_model(*model.ptr(), plan.device, precision, config.train.channels_last);
  TrainerParts parts;
  // The groups first (every parameter still requires its gradient), then model.freeze: the parts are
  // frozen when training starts (FreezeCallback releases them at their epoch, or at once on resume).
  const RunParameters params = run_parameters(config, *model.ptr());
  if (config.freeze.enabled()) set_frozen(*model.ptr(), config.freeze.patterns, true);
  parts.optimizer = make_optimizer(config.optimizer, params.groups, plan.device);
  parts.model = std::move(model);
  parts.loss = make_loss(config.loss, config.train.label_smoothing);
  parts.scaler = std::make_unique<GradScaler>(
      GradScalerOptions(config.train.loss_scale).with_enabled(needs_loss_scaling(precision)), plan.device);
  const ScheduleOptions schedule = config.schedule;
  const double base_lr = plan.batches.lr;
  const int64_t steps_per_epoch = plan.steps_per_epoch, epochs = config.train.epochs;
  parts.schedule = [=](int64_t step) { return scheduled_lr(schedule, base_lr, step, steps_per_epoch, epochs); };
  if (config.train.ema_decay > 0) {
    parts.ema = std::make_unique<ModelEma>(config.train.ema_decay, config.train.ema_warmup);
  }
  return parts;
}

}  // namespace stoker
