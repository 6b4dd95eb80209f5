#include "recipe/factory.h"

#include <algorithm>
#include <thread>

#include <torch/torch.h>

#include "common/error.h"
#include "common/log.h"
#include "recipe/continuous.h"
#include "recipe/device.h"
#include "recipe/param_groups.h"
#include "recipe/pretrained.h"
#include "recipe/sizing.h"
#include "parallel/strategy.h"
#include "trainer/freeze.h"

namespace stoker {
namespace {

// The sizing checks: warnings, or one error listing them all with train.strict_sizes.
void check_model_sizes(const Config& config, torch::nn::Module& model, int64_t channels) {
  const std::vector<std::string> findings =
      check_sizes(model, config.data.batch_size, channels, config.data.num_classes);
  if (config.train.strict_sizes && !findings.empty()) {
    std::string all;
    for (const auto& w : findings) all += "\n  " + w;
    STOKER_FAIL("train.strict_sizes is on and {} size(s) are not tensor-core friendly:{}\nchange them, "
                "or set train.strict_sizes: false to train anyway",
                findings.size(), all);
  }
  for (const auto& finding : findings) logger().warn("size check: {}", finding);
}

// The source of the training batches: the loader, or a RetunableLoader around it with
// data.resolution_schedule (whose size it changes between epochs) or data.autotune: continuous
// (whose workers `continuous`, set here, changes between steps).
std::shared_ptr<data::BatchSource> training_source(const RunPlan& plan, const std::shared_ptr<data::Loader>& loader,
                                                   std::shared_ptr<ContinuousWorkers>& continuous) {
  const Config& c = plan.config;
  const data::ResolutionSchedule& schedule = c.data.resolution_schedule;
  const bool retune = c.data.autotune == "continuous";
  if (!retune && !schedule.enabled()) return loader;
  auto retunable = std::make_shared<data::RetunableLoader>(plan.train_set, loader);
  if (schedule.enabled()) {
    retunable->set_resolution([schedule](int64_t epoch) { return schedule.size_at(epoch); }, c.data.train_transforms);
  }
  if (!retune) return retunable;
  const auto cores = static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  const ContinuousPolicy policy = ContinuousPolicy::from(c.data.autotune_continuous, cores);
  continuous = std::make_shared<ContinuousWorkers>(retunable, policy, c.train.log_every_steps, c.run.threads,
                                                   plan.device.is_cpu());
  return retunable;
}

// distributed.strategy as this run takes it: auto is ddp (zero1 with distributed.shard_optimizer: true,
// said once); alone, single whatever was asked (saying so when it was more).
std::string strategy_name(const DistributedOptions& d, bool joined) {
  std::string name = d.strategy;
  if (d.shard_optimizer) {  // the config refused it beside another strategy than auto or zero1
    logger().info("distributed.shard_optimizer: true means distributed.strategy: zero1");
    name = "zero1";
  }
  if (!joined) {
    if (d.sync_batchnorm || (name != "auto" && name != "single")) {
      logger().info("distributed.{}: one process, nothing to {}", d.sync_batchnorm ? "sync_batchnorm" : "strategy",
                    d.sync_batchnorm ? "synchronise (plain BatchNorm)"
                                     : fmt::format("distribute ({}: the whole optimizer state here)", name));
    }
    return "single";
  }
  return name == "auto" ? "ddp" : name;
}

// How the ranks train together (parallel/strategy.h), set up by the Trainer over the parts.
std::shared_ptr<parallel::Strategy> make_run_strategy(const RunPlan& plan, torch::nn::Module& model,
                                                      std::shared_ptr<distributed::ProcessGroup> group) {
  const Config& c = plan.config;
  parallel::StrategyContext context;
  context.sync_batchnorm = c.distributed.sync_batchnorm;
  context.eval_bn_reduce = c.distributed.eval_bn == "reduce";
  // On the CPU a stop is agreed every step (a few microseconds of Gloo); on CUDA at the logging
  // interval, where the host waits for the device anyway.
  context.stop_check_every = plan.device.is_cuda() ? c.train.log_every_steps : 1;
  // zero1's optimizer over this rank's pieces: the run's parameter groups (layer-wise learning rates, the
  // head's scale: recipe/param_groups.h); model.freeze, which would change them, is refused with it.
  const std::string name = strategy_name(c.distributed, group != nullptr);
  context.optimizer = c.optimizer;
  if (name == "zero1") context.groups = run_parameters(c, model).groups;
  context.device = plan.device;
  context.group = std::move(group);
  return parallel::make_strategy(name, context);
}

}  // namespace

std::unique_ptr<Trainer> make_trainer(const RunPlan& plan, torch::nn::AnyModule model,
                                      std::shared_ptr<data::BatchSource> train,
                                      std::shared_ptr<data::BatchSource> eval,
                                      std::shared_ptr<distributed::ProcessGroup> group) {
  STOKER_CHECK(!model.is_empty(), "make_trainer needs a model");
  STOKER_CHECK(train && train->num_batches() > 0, "make_trainer needs a training source with batches");
  STOKER_CHECK(plan.config.train.precision != Precision::kAuto,
               "make_trainer: the plan's train.precision is still auto; resolve the plan first (resolve_plan)");
  check_model_sizes(plan.config, *model.ptr(), train->channels());
  if (plan.config.activation_checkpointing.any()) {
    const auto blocks = models::checkpointable_blocks(*model.ptr());
    int64_t on = 0;
    for (const auto* block : blocks) on += block->checkpointing() ? 1 : 0;
    logger().info("model.activation_checkpointing: {} of {} blocks recompute their activations in backward", on,
                  blocks.size());
  }
  TrainerOptions options = trainer_options(plan);
  options.class_names = train->class_names();
  TrainerParts parts = make_parts(plan, std::move(model));
  parts.strategy = make_run_strategy(plan, *parts.model.ptr(), std::move(group));
  auto trainer = std::make_unique<Trainer>(std::move(options), std::move(parts), std::move(train), std::move(eval));
  if (plan.config.freeze.enabled()) {
    // Released parts get their gradients synchronised by the strategy (Trainer::trainable_changed).
    trainer->add_callback(std::make_shared<FreezeCallback>(plan.config.freeze));
  }
  STOKER_CHECK(trainer->steps_per_epoch() == plan.steps_per_epoch,
               "make_trainer: the training source gives {} optimizer steps per epoch, the plan {}; build the plan from "
               "the same data (resolve_plan, plan_for_source)",
               trainer->steps_per_epoch(), plan.steps_per_epoch);
  return trainer;
}

std::unique_ptr<Trainer> make_trainer(const Config& config, torch::nn::AnyModule model,
                                      std::shared_ptr<data::BatchSource> train,
                                      std::shared_ptr<data::BatchSource> eval, torch::Device device,
                                      std::shared_ptr<distributed::ProcessGroup> group) {
  STOKER_CHECK(train && train->num_batches() > 0, "make_trainer needs a training source with batches");
  const int64_t world_size = group ? group->world_size() : 1, rank = group ? group->rank() : 0;
  const RunPlan plan = plan_for_source(config, *train, device, world_size, rank);
  return make_trainer(plan, std::move(model), std::move(train), std::move(eval), std::move(group));
}

TrainingSetup make_training(const RunPlan& plan, const Distributed& distributed) {
  TrainingSetup setup;
  setup.plan = plan;
  setup.loaders = make_loaders(plan);
  std::shared_ptr<ContinuousWorkers> continuous;
  setup.train_source = training_source(plan, setup.loaders.train, continuous);
  // A RetunableLoader replaces the loader when the size changes: it alone holds it, so that the old
  // loader's workers and buffers go then.
  if (setup.train_source != setup.loaders.train) setup.loaders.train.reset();
  torch::nn::AnyModule model = make_model(plan.config, plan.input);
  // A new run starts from model.pretrained; a resumed one from its checkpoint, which holds the weights.
  if (!plan.config.pretrained.file.empty() && !plan.resuming) {
    setup.notes.push_back(load_pretrained(*model.ptr(), plan.config));
  }
  // Batch operations (data.batch_ops) on the device, after whatever hands out the batches.
  setup.trainer = make_trainer(plan, std::move(model), augment_training(plan.config, setup.train_source, plan.rank),
                               setup.loaders.test, distributed.group);
  if (continuous) setup.trainer->add_callback(continuous);
  // The run's process-wide settings, once: TF32 and cuDNN's autotuner (the Trainer sets nothing
  // process-wide).
  apply_process_settings(plan);
  return setup;
}

TrainingSetup make_training(const Config& config) {
  Distributed alone;
  alone.device = resolve_device(config.run.device);
  return make_training(resolve_plan(config, alone), alone);
}

}  // namespace stoker
