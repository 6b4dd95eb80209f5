#include "recipe/factory.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include <torch/torch.h>

#include "common/error.h"
#include "data/cache.h"
#include "recipe/continuous.h"
#include "optim/optim.h"
#include "optim/schedule.h"
#include "trainer/keep_rng.h"
#include "common/log.h"
#include "recipe/sizing.h"

namespace stoker {

torch::nn::AnyModule make_model(const Config& config, int64_t in_channels) {
  return models::create_model(config.model, {in_channels, config.data.num_classes});
}


namespace {

// Puts the process-wide TF32 settings back as they were when it goes away.
class KeepTf32 {
 public:
  KeepTf32() : cublas_(at::globalContext().allowTF32CuBLAS()), cudnn_(at::globalContext().allowTF32CuDNN()) {}
  ~KeepTf32() {
    at::globalContext().setAllowTF32CuBLAS(cublas_);
    at::globalContext().setAllowTF32CuDNN(cudnn_);
  }
  KeepTf32(const KeepTf32&) = delete;
  KeepTf32& operator=(const KeepTf32&) = delete;

 private:
  bool cublas_, cudnn_;
};

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

StepTime time_training_step(const Config& config, torch::Device device, const data::InputShape& shape,
                            Precision precision, bool channels_last, int64_t warmup, int64_t steps,
                            double budget_seconds) {
  STOKER_CHECK(shape.fixed() && steps > 0,
               "timing a training step needs a fixed input shape, got {}x{}x{}", shape.channels, shape.height,
               shape.width);
  const KeepRng keep_rng(device);
  const KeepTf32 keep_tf32;
  apply_global_precision(precision);  // TF32 as a run in this precision has it, for the timed steps
  Config c = config;
  c.train.precision = precision;
  c.train.channels_last = channels_last;
  c.train.cuda_graph = false;
  c.train.ema_decay = 0;
  const int64_t batch = c.data.batch_size;
  data::Batch b;
  b.input = torch::randn({batch, shape.channels, shape.height, shape.width}).to(device);
  if (is_mixed(precision) || precision == Precision::kBf16True) {
    b.input = b.input.to(is_mixed(precision) ? autocast_dtype(precision) : parameter_dtype(precision));
  }
  if (channels_last) b.input = b.input.contiguous(torch::MemoryFormat::ChannelsLast);
  b.target = torch::randint(c.data.num_classes, {batch}, torch::kLong).to(device);
  auto source = std::make_shared<data::CachedBatchSource>(std::vector<data::Batch>{b}, 1, shape.channels,
                                                          shape.height, shape.width);
  Trainer trainer(trainer_options(c, device), make_parts(c, make_model(c, shape.channels), device, 1000), source,
                  source);
  trainer.module().train();
  const auto sync = [&] {
    if (device.is_cuda()) torch::cuda::synchronize(device.index());
  };
  for (int64_t i = 0; i < warmup; ++i) trainer.train_step(b);
  sync();
  StepTime t;
  t.precision = precision;
  const auto start = std::chrono::steady_clock::now();
  while (t.steps < steps && (t.steps == 0 || seconds_since(start) < budget_seconds)) {
    trainer.train_step(b);
    sync();
    ++t.steps;
  }
  t.ms = 1e3 * seconds_since(start) / static_cast<double>(t.steps);
  return t;
}

void PrecisionDecision::log() const {
  if (line.empty()) return;
  if (warning) {
    logger().warn("{}", line);
  } else {
    logger().info("{}", line);
  }
}

PrecisionDecision choose_precision(const Config& config, torch::Device device, const data::InputShape& shape) {
  PrecisionDecision d;
  d.precision = config.train.precision;
  const bool timeable = shape.fixed();
  const HardwareFeatures hardware = detect_hardware(device);
  const bool channels_last = config.train.channels_last;
  if (d.precision != Precision::kAuto) {
    if (runs_natively(d.precision, hardware) || !timeable) return d;
    // Not native here: one warm-up and a few steps of each, enough to see a 2x difference.
    const StepTime asked = time_training_step(config, device, shape, d.precision, channels_last, 1, 3);
    const StepTime fp32 = time_training_step(config, device, shape, Precision::kFp32, channels_last, 1, 3);
    const std::optional<std::string> warning = slow_precision_warning(asked, fp32, hardware);
    d.warning = warning.has_value();
    d.line = warning.value_or("");
    return d;
  }
  const PrecisionPlan plan = plan_auto_precision(hardware);
  std::vector<StepTime> times;
  if (plan.candidates.size() > 1 && timeable) {
    for (Precision p : plan.candidates) times.push_back(time_training_step(config, device, shape, p, channels_last));
  }
  d.precision = times.empty() ? plan.candidates.front() : pick_fastest(times);
  d.line = describe_choice(d.precision, plan, times, hardware);
  return d;
}

TrainerOptions trainer_options(const Config& config, torch::Device device, int64_t world_size) {
  TrainerOptions o;
  o.epochs = config.train.epochs;
  o.precision = config.train.precision;
  o.accumulate_steps = accumulate_steps_of(config, world_size);
  o.batch_size = config.data.batch_size;
  o.grad_clip_norm = config.train.grad_clip_norm;
  o.cuda_graph = config.train.cuda_graph;
  o.device = device;
  // Data parallel: on the CPU a stop is agreed every step (a few microseconds of Gloo); on CUDA at the
  // logging interval, where the host waits for the device anyway.
  o.stop_check_every = device.is_cuda() ? config.train.log_every_steps : 1;
  o.nonfinite = NonfiniteOptions()
                    .set_on_nonfinite(config.train.on_nonfinite)
                    .set_max_skips(config.train.max_nonfinite_skips)
                    .set_check_every_steps(config.train.log_every_steps);
  o.config_yaml = config_to_yaml(config);
  return o;
}

TrainerParts make_parts(const Config& config, torch::nn::AnyModule model, torch::Device device,
                        int64_t steps_per_epoch, int64_t world_size) {
  const Precision precision = config.train.precision;
  prepare_model(*model.ptr(), device, precision, config.train.channels_last);
  TrainerParts parts;
  parts.optimizer = make_optimizer(config.optimizer, *model.ptr(), device);
  parts.model = std::move(model);
  parts.loss = make_loss(config.loss, config.train.label_smoothing);
  const LossScaleOptions& ls = config.train.loss_scale;
  parts.scaler = std::make_unique<GradScaler>(GradScalerOptions()
                                                  .with_init_scale(ls.init_scale)
                                                  .with_growth_factor(ls.growth_factor)
                                                  .with_backoff_factor(ls.backoff_factor)
                                                  .with_growth_interval(ls.growth_interval)
                                                  .with_enabled(needs_loss_scaling(precision)),
                                              device);
  const ScheduleOptions schedule = config.schedule;
  const double base_lr = effective_lr(config, world_size);
  const int64_t epochs = config.train.epochs;
  parts.schedule = [=](int64_t step) { return scheduled_lr(schedule, base_lr, step, steps_per_epoch, epochs); };
  if (config.train.ema_decay > 0) {
    parts.ema = std::make_unique<ModelEma>(config.train.ema_decay, config.train.ema_warmup);
  }
  return parts;
}

std::unique_ptr<Trainer> make_trainer(const Config& config, torch::nn::AnyModule model,
                                      std::shared_ptr<data::BatchSource> train,
                                      std::shared_ptr<data::BatchSource> eval, torch::Device device,
                                      std::shared_ptr<distributed::ProcessGroup> group) {
  STOKER_CHECK(!model.is_empty(), "make_trainer needs a model");
  STOKER_CHECK(train && train->num_batches() > 0, "make_trainer needs a training source with batches");
  const std::vector<std::string> findings =
      check_sizes(*model.ptr(), config.data.batch_size, train->channels(), config.data.num_classes);
  if (config.train.strict_sizes && !findings.empty()) {
    std::string all;
    for (const auto& w : findings) all += "\n  " + w;
    STOKER_FAIL("train.strict_sizes is on and {} size(s) are not tensor-core friendly:{}\nchange them, "
                "or set train.strict_sizes: false to train anyway",
                findings.size(), all);
  }
  for (const auto& finding : findings) logger().warn("size check: {}", finding);
  if (config.train.precision == Precision::kAuto) {
    Config resolved = config;
    const PrecisionDecision decision = choose_precision(config, device, train->shape());
    decision.log();
    resolved.train.precision = decision.precision;
    return make_trainer(resolved, std::move(model), std::move(train), std::move(eval), device, std::move(group));
  }
  const int64_t world_size = group ? group->world_size() : 1;
  const int64_t per_step = config.data.batch_size * shards_of(config, world_size);
  STOKER_CHECK(config.train.effective_batch_size == 0 || config.train.effective_batch_size % per_step == 0,
               "train.effective_batch_size ({}) must be a multiple of data.batch_size x the {} rank(s) ({}); use {} "
               "or {}",
               config.train.effective_batch_size, shards_of(config, world_size), per_step,
               per_step * std::max<int64_t>(1, config.train.effective_batch_size / per_step),
               per_step * (config.train.effective_batch_size / per_step + 1));
  TrainerOptions options = trainer_options(config, device, world_size);
  options.class_names = train->class_names();
  const int64_t steps_per_epoch = (train->num_batches() + options.accumulate_steps - 1) / options.accumulate_steps;
  TrainerParts parts = make_parts(config, std::move(model), device, steps_per_epoch, world_size);
  if (group) parts.data_parallel = group->data_parallel(*parts.model.ptr());
  return std::make_unique<Trainer>(std::move(options), std::move(parts), std::move(train), std::move(eval));
}

bool apply_cudnn_benchmark(const Config& config, const data::BatchSource& train, torch::Device device) {
  const bool fixed_shapes = train.out_height() > 0 && train.out_width() > 0;
  const bool cuda = device.is_cuda();
  const bool on = config.train.cudnn_benchmark && cuda && fixed_shapes;
  at::globalContext().setBenchmarkCuDNN(on);
  if (config.train.cudnn_benchmark && cuda && !fixed_shapes) {
    logger().info("train.cudnn_benchmark: off, because the training batches vary in shape");
  }
  return on;
}

namespace {
// The source of the training batches: the loader, or a RetunableLoader around it with
// data.resolution_schedule (whose size it changes between epochs) or data.autotune: continuous
// (whose workers `continuous`, set here, changes between steps).
std::shared_ptr<data::BatchSource> training_source(const Config& resolved, const TrainingSetup& setup,
                                                   const std::shared_ptr<data::Dataset>& train_set,
                                                   std::shared_ptr<ContinuousWorkers>& continuous) {
  const data::ResolutionSchedule& schedule = resolved.data.resolution_schedule;
  const bool retune = resolved.data.autotune == "continuous";
  if (!retune && !schedule.enabled()) return setup.loaders.train;
  auto retunable = std::make_shared<data::RetunableLoader>(train_set, setup.loaders.train);
  if (schedule.enabled()) {
    retunable->set_resolution([schedule](int64_t epoch) { return schedule.size_at(epoch); },
                              resolved.data.train_transforms);
  }
  if (!retune) return retunable;
  const auto cores = static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  const ContinuousPolicy policy = ContinuousPolicy::from(resolved.data.autotune_continuous, cores);
  continuous = std::make_shared<ContinuousWorkers>(retunable, policy, resolved.train.log_every_steps,
                                                   resolved.run.threads, setup.device.is_cpu());
  return retunable;
}
}  // namespace

TrainingSetup make_training(const Config& config) {
  Distributed alone;
  alone.device = resolve_device(config.run.device);
  return make_training(config, alone);
}

TrainingSetup make_training(const Config& config, const Distributed& distributed) {
  TrainingSetup setup;
  setup.config = config;
  setup.device = distributed.device;
  setup.world_size = distributed.world_size();
  select_device(setup.device);  // before anything is allocated for it (pinned buffers, the model)
  configure_threads(config.run.threads, config.data.workers, setup.device.is_cpu());
  torch::manual_seed(config.run.seed);
  std::shared_ptr<data::Dataset> train = make_dataset(config, "train");
  // Before the loaders: mixed precision has them hand out inputs in its compute dtype.
  setup.precision = choose_precision(config, setup.device, input_shape(config, train));
  setup.config.train.precision = setup.precision.precision;
  const Config& resolved = setup.config;
  const std::shared_ptr<data::Dataset> train_set = train;
  setup.loaders = make_loaders(resolved, setup.device, std::move(train), {distributed.rank(), distributed.world_size()});
  std::shared_ptr<ContinuousWorkers> continuous;
  setup.train_source = training_source(resolved, setup, train_set, continuous);
  // A RetunableLoader replaces the loader when the size changes: it alone holds it, so that the old
  // loader's workers and buffers go then.
  if (setup.train_source != setup.loaders.train) setup.loaders.train.reset();
  // Batch operations (mixup, cutmix, erasing) on the device, after whatever hands out the batches.
  setup.trainer = make_trainer(resolved, make_model(resolved, setup.loaders.in_channels),
                               augment_training(resolved, setup.train_source, distributed.rank()),
                               setup.loaders.test, setup.device, distributed.group);
  if (continuous) setup.trainer->add_callback(continuous);
  // The run's process-wide settings, once: TF32 (the Trainer itself sets nothing process-wide).
  apply_global_precision(resolved.train.precision);
  apply_cudnn_benchmark(resolved, *setup.train_source, setup.device);
  return setup;
}

}  // namespace stoker
