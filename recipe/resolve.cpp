#include "recipe/resolve.h"

#include <torch/torch.h>

#include "common/error.h"
#include "common/log.h"
#include "parallel/strategy.h"
#include "recipe/device.h"
#include "models/registry.h"
#include "recipe/loaders.h"
#include "recipe/parts.h"
#include "trainer/callbacks.h"

namespace stoker {
namespace {

// The batch arithmetic for `world_size` ranks; an error when it does not add up.
BatchArithmetic checked_batches(const Config& config, int64_t world_size) {
  BatchArithmetic a = batch_arithmetic(config, world_size);
  STOKER_CHECK(a.problem.empty(), "{}", a.problem);
  return a;
}

// train.precision for a plan whose shape and length are known: decided on rank 0 (the trial), then
// handed to the other ranks with the line that says why.
PrecisionDecision decide_for_ranks(const RunPlan& plan, const Distributed& distributed, const TrialBounds& bounds) {
  if (!distributed.group || distributed.world_size() == 1) return decide_precision(plan, bounds);
  const bool auto_precision = plan.config.train.precision == Precision::kAuto;
  PrecisionDecision d;
  d.precision = plan.config.train.precision;
  std::string text;
  if (distributed.rank() == 0) {
    d = decide_precision(plan, bounds);
    text = std::string(precision_name(d.precision)) + "\n" + d.line;
  }
  if (!auto_precision) return distributed.rank() == 0 ? d : PrecisionDecision{d.precision, "", false};
  text = distributed.group->broadcast_text("train.precision", text);
  const size_t newline = text.find('\n');
  d.precision = parse_precision(text.substr(0, newline));
  d.line = text.substr(newline + 1);
  if (distributed.rank() != 0) d.line += " (rank 0's decision)";
  return d;
}

}  // namespace

RunPlan resolve_plan(const Config& config, const Distributed& distributed, const TrialBounds& bounds) {
  RunPlan plan;
  plan.config = config;
  plan.device = distributed.device;
  plan.rank = distributed.rank();
  plan.world_size = distributed.world_size();
  // 1. The process: before anything is allocated for the device (pinned buffers, the model).
  select_device(plan.device);
  configure_threads(config.run.threads, config.data.workers, plan.device.is_cpu());
  // Each rank its own stream (run.seed + rank, as timm): dropout and drop path draw their masks from it,
  // so the ranks do not draw the same masks for different samples; rank 0 and one process keep run.seed's.
  torch::manual_seed(parallel::rank_seed(config.run.seed, plan.rank));
  // 2. The cheap checks, before any step is timed.
  plan.batches = checked_batches(config, plan.world_size);
  plan.train_set = make_dataset(config, "train");
  if (config.data.num_classes == 0) {
    plan.config.data.num_classes = plan.train_set->num_classes();
    logger().info("data.num_classes: {}, from the training data", plan.config.data.num_classes);
  }
  plan.train_samples = plan.train_set->size();
  plan.batches_per_epoch = training_batches_per_epoch(plan.config, *plan.train_set, data_ranks(plan));
  plan.steps_per_epoch = optimizer_steps_per_epoch(plan.batches_per_epoch, plan.batches.accumulate_steps);
  plan.input = input_shape(plan.config, plan.train_set);
  models::resolve_model_options(plan.config.model, model_shape(plan.config, plan.input));
  // 3. cuDNN's autotuner before the trial, so that the trial's steps and the run's both tune.
  plan.cudnn_benchmark = config.train.cudnn_benchmark && plan.device.is_cuda() && plan.input.fixed();
  at::globalContext().setBenchmarkCuDNN(plan.cudnn_benchmark);
  if (config.train.cudnn_benchmark && plan.device.is_cuda() && !plan.input.fixed()) {
    logger().info("train.cudnn_benchmark: off, because the training batches vary in shape");
  }
  check_stop_requested("the run's set-up");
  // 4. The precision.
  plan.precision = decide_for_ranks(plan, distributed, bounds);
  plan.config.train.precision = plan.precision.precision;
  // 5. What the run saves and logs.
  plan.yaml = config_to_yaml(plan.config);
  return plan;
}

RunPlan resolve_plan(const Config& config) {
  Distributed alone;
  alone.device = resolve_device(config.run.device);
  return resolve_plan(config, alone);
}

RunPlan plan_for_source(const Config& config, const data::BatchSource& train, torch::Device device,
                        int64_t world_size, int64_t rank) {
  RunPlan plan;
  plan.config = config;
  plan.device = device;
  plan.rank = rank;
  plan.world_size = world_size;
  plan.batches = checked_batches(config, world_size);
  plan.train_samples = train.num_samples();
  plan.batches_per_epoch = train.num_batches();
  plan.steps_per_epoch = optimizer_steps_per_epoch(plan.batches_per_epoch, plan.batches.accumulate_steps);
  plan.input = train.shape();
  models::resolve_model_options(plan.config.model, model_shape(config, plan.input));
  plan.cudnn_benchmark = config.train.cudnn_benchmark && device.is_cuda() && plan.input.fixed();
  if (config.train.precision == Precision::kAuto) {
    plan.precision = decide_precision(plan);
    plan.precision.log();
  } else {
    plan.precision.precision = config.train.precision;
  }
  plan.config.train.precision = plan.precision.precision;
  plan.yaml = config_to_yaml(plan.config);
  return plan;
}

void apply_loader_settings(RunPlan& plan, const Config& tuned) {
  data::DataSettings& d = plan.config.data;
  const bool new_cache = tuned.data.cache != d.cache;
  d.workers = tuned.data.workers;
  d.prefetch_factor = tuned.data.prefetch_factor;
  d.device_prefetch = tuned.data.device_prefetch;
  d.cache = tuned.data.cache;
  configure_threads(plan.config.run.threads, d.workers, plan.device.is_cpu());
  if (new_cache) plan.train_set = make_dataset(plan.config, "train");
  plan.yaml = config_to_yaml(plan.config);
}

void apply_process_settings(const RunPlan& plan) {
  apply_global_precision(plan.config.train.precision);
  at::globalContext().setBenchmarkCuDNN(plan.cudnn_benchmark);
}

}  // namespace stoker
