#include "recipe/resolve.h"

#include <torch/torch.h>

#include "common/error.h"
#include "common/log.h"
#include "parallel/strategy.h"
#include "recipe/device.h"
#include "models/registry.h"
#include "recipe/loaders.h"
#include "recipe/parts.h"
#include "recipe/pretrained.h"
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

// The plan's first step, shared by both: who and where (the rank of how many, on which device) and the
// batch arithmetic checked.
RunPlan start_plan(const Config& config, torch::Device device, int64_t rank, int64_t world_size) {
  RunPlan plan;
  plan.config = config;
  plan.device = device;
  plan.rank = rank;
  plan.world_size = world_size;
  plan.batches = checked_batches(config, world_size);
  return plan;
}

// The next, once the training batches are known (a data set's or an application's source): optimizer
// steps per epoch, the model's keys the input decides, cuDNN's autotuner for a fixed shape on CUDA.
void plan_training_batches(RunPlan& plan, int64_t samples, int64_t batches_per_epoch, const data::InputShape& input) {
  plan.train_samples = samples;
  plan.batches_per_epoch = batches_per_epoch;
  plan.steps_per_epoch = optimizer_steps_per_epoch(plan.batches_per_epoch, plan.batches.accumulate_steps);
  plan.input = input;
  models::resolve_model_options(plan.config.model, model_shape(plan.config, plan.input));
  plan.cudnn_benchmark = plan.config.train.cudnn_benchmark && plan.device.is_cuda() && plan.input.fixed();
}

// The last: the precision decided and the YAML the run saves.
void finish_plan(RunPlan& plan, PrecisionDecision precision) {
  plan.precision = std::move(precision);
  plan.config.train.precision = plan.precision.precision;
  plan.yaml = config_to_yaml(plan.config);
}

}  // namespace

RunPlan resolve_plan(const Config& config, const Distributed& distributed, const TrialBounds& bounds) {
  // 1. The process: before anything is allocated for the device (pinned buffers, the model).
  select_device(distributed.device);
  configure_threads(config.run.threads, config.data.workers, distributed.device.is_cpu());
  // Each rank its own stream (run.seed + rank, as timm): dropout and drop path draw their masks from it,
  // so the ranks do not draw the same masks for different samples; rank 0 and one process keep run.seed's.
  torch::manual_seed(parallel::rank_seed(config.run.seed, distributed.rank()));
  // 2. The cheap checks, before any step is timed.
  RunPlan plan = start_plan(config, distributed.device, distributed.rank(), distributed.world_size());
  plan.train_set = make_dataset(config, "train");
  if (config.data.num_classes == 0) {
    plan.config.data.num_classes = plan.train_set->num_classes();
    logger().info("data.num_classes: {}, from the training data", plan.config.data.num_classes);
  }
  plan_training_batches(plan, plan.train_set->size(),
                        training_batches_per_epoch(plan.config, *plan.train_set, data_ranks(plan)),
                        input_shape(plan.config, plan.train_set));
  apply_pretrained_cfg(plan.config, plan.input.channels);
  // 3. cuDNN's autotuner before the trial, so that the trial's steps and the run's both tune.
  at::globalContext().setBenchmarkCuDNN(plan.cudnn_benchmark);
  if (config.train.cudnn_benchmark && plan.device.is_cuda() && !plan.input.fixed()) {
    logger().info("train.cudnn_benchmark: off, because the training batches vary in shape");
  }
  check_stop_requested("the run's set-up");
  // 4. The precision, and 5. what the run saves and logs.
  finish_plan(plan, decide_for_ranks(plan, distributed, bounds));
  return plan;
}

RunPlan resolve_plan(const Config& config) {
  Distributed alone;
  alone.device = resolve_device(config.run.device);
  return resolve_plan(config, alone);
}

RunPlan plan_for_source(const Config& config, const data::BatchSource& train, torch::Device device,
                        int64_t world_size, int64_t rank) {
  // The same sequence as resolve_plan's, with the source's batches for the data set's and nothing
  // process-wide set.
  RunPlan plan = start_plan(config, device, rank, world_size);
  plan_training_batches(plan, train.num_samples(), train.num_batches(), train.shape());
  apply_pretrained_cfg(plan.config, plan.input.channels);
  PrecisionDecision precision;
  precision.precision = config.train.precision;
  if (config.train.precision == Precision::kAuto) {
    precision = decide_precision(plan);
    precision.log();
  }
  finish_plan(plan, std::move(precision));
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
