// The caching ladder of `trainer doctor` (see doctor.h): building each rung's batch source and
// timing the real training step over it.
#include "doctor/doctor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>

#include <torch/torch.h>

#include "common/error.h"
#include "common/hardware.h"
#include "common/trace.h"
#include "data/cache.h"
#include "data/loader.h"
#include "data/normalize.h"
#include "data/prefetcher.h"
#include "doctor/detail.h"
#include "recipe/factory.h"
#include "common/log.h"
#include "recipe/precision_trial.h"
#include "trainer/precision_choice.h"
#include "recipe/run.h"

namespace stoker {
namespace doctor {

Bench make_bench(const RunPlan& plan) {
  Bench b;
  b.plan = plan;
  b.loader = make_loader(plan.config, plan.train_set, plan.device, "train", false, data_ranks(plan));
  b.trainer = make_trainer(plan, make_model(plan.config, plan.input), b.loader, b.loader);
  apply_process_settings(plan);  // process-wide, as a training run sets them
  return b;
}

Bench make_bench(const Config& recipe) {
  const RunPlan plan = resolve_plan(recipe);
  plan.precision.log();
  return make_bench(plan);
}

void synchronize(torch::Device device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

namespace {
// The next batch of `source`, starting its next epoch when one ends.
data::Batch next_batch(data::BatchSource& source, int64_t& epoch) {
  std::optional<data::Batch> b = source.next();
  if (!b) {
    source.start_epoch(++epoch);
    b = source.next();
    STOKER_CHECK(b.has_value(), "doctor: the data gives no batch in an epoch (fewer samples than one batch?)");
  }
  return std::move(*b);
}
}  // namespace

RungResult measure_rung(const std::string& name, Trainer& trainer, data::BatchSource& source, int64_t warmup,
                        int64_t steps) {
  using clock = std::chrono::steady_clock;
  RungResult r;
  r.name = name;
  int64_t epoch = 0;
  source.start_epoch(epoch);
  trainer.module().train();
  for (int64_t i = 0; i < warmup; ++i) trainer.train_step(next_batch(source, epoch));
  synchronize(trainer.device());
  (void)source.take_times();
  double wait = 0;
  const auto start = clock::now();
  torch::Tensor loss;
  for (int64_t i = 0; i < steps; ++i) {
    const auto asked = clock::now();
    data::Batch batch = [&] {
      trace::Scope traced("next batch");
      return next_batch(source, epoch);
    }();
    wait += std::chrono::duration<double>(clock::now() - asked).count();
    loss = trainer.train_step(batch);
    r.samples += batch.size();
  }
  synchronize(trainer.device());
  r.seconds = std::chrono::duration<double>(clock::now() - start).count();
  r.stages = source.take_times();
  r.steps = steps;
  r.steps_per_s = static_cast<double>(steps) / r.seconds;
  r.samples_per_s = static_cast<double>(r.samples) / r.seconds;
  r.wait_share = std::min(1.0, wait / r.seconds);
  r.last_loss = loss.defined() ? loss.item<double>() : 0.0;
  return r;
}

const RungResult* faster_than_ceiling(const std::vector<RungResult>& rungs) {
  if (rungs.empty() || !rungs.front().measured) return nullptr;
  const double ceiling = rungs.front().samples_per_s;
  const RungResult* fastest = nullptr;
  for (size_t i = 1; i < rungs.size(); ++i) {
    const RungResult& r = rungs[i];
    if (r.measured && r.samples_per_s > 1.1 * ceiling && (fastest == nullptr || r.samples_per_s > fastest->samples_per_s)) {
      fastest = &r;
    }
  }
  return fastest;
}

void take_slowed_ceiling(LadderResult& result) {
  const RungResult* fastest = faster_than_ceiling(result.rungs);
  if (fastest == nullptr) return;
  RungResult& ceiling = result.rungs.front();
  result.context.ceiling_taken_from = fastest->name;
  result.context.ceiling_measured_samples_per_s = ceiling.samples_per_s;
  RungResult taken = *fastest;
  taken.name = ceiling.name;
  taken.stages = {};
  taken.wait_share = 0;
  ceiling = taken;
}

std::shared_ptr<data::BatchSource> device_cached_source(data::Loader& loader, int64_t count) {
  return std::make_shared<data::CachedBatchSource>(data::take_batches(loader, count), loader.num_batches(),
                                                   loader.channels(), loader.out_height(), loader.out_width());
}

}  // namespace doctor

using doctor::measure_rung;

double RungResult::us_per_sample(double seconds_in_stage) const {
  return samples > 0 ? 1e6 * seconds_in_stage / static_cast<double>(samples) : 0.0;
}

const RungResult& LadderResult::rung(const std::string& name) const {
  for (const RungResult& r : rungs) {
    if (r.name == name) return r;
  }
  throw Error(fmt::format("doctor: no rung named '{}'", name));
}

namespace {

// Finished uint8 batches kept in (pinned) host memory; every next() copies one to the device and
// normalises it there, as the loader's prefetcher does.
std::shared_ptr<data::BatchSource> host_cached_source(const Config& config, std::shared_ptr<data::Dataset> dataset,
                                                      const data::Loader& full, int64_t count) {
  const torch::Device device = full.options().device;
  auto u8 = make_loader(config, std::move(dataset), torch::kCPU, "train", /*output_uint8=*/true);
  std::vector<data::Batch> batches = data::take_batches(*u8, count);
  for (data::Batch& b : batches) {
    b.input = b.input.pin_memory();
    b.target = b.target.to(device);
  }
  data::Normalizer normalize(full.channels(), full.options().normalize());
  // As the prefetcher does: the copy on a side stream, the compute stream waiting for it on the GPU
  // (the cached host batches never change: the host need not wait).
  auto prepare = [device, normalize](const torch::Tensor& host) {
    return normalize(data::copy_on_side_stream({host}, device, /*non_blocking=*/true, /*host_waits=*/false)[0]);
  };
  return std::make_shared<data::CachedBatchSource>(std::move(batches), full.num_batches(), full.channels(),
                                                   full.out_height(), full.out_width(), prepare);
}

std::string cache_note(const data::CachedDataset& cache) {
  std::string note = fmt::format("{} samples cached ({:.1f} MB, filled in {:.1f} s)", cache.size(),
                                 static_cast<double>(cache.bytes()) / 1e6, cache.fill_seconds());
  if (!cache.subset_reason().empty()) note += fmt::format("; a subset: {}", cache.subset_reason());
  return note;
}

// A rung over a CachedDataset of `level`, holding the samples the timed steps use.
RungResult cached_dataset_rung(const Config& config, Trainer& trainer, std::shared_ptr<data::Dataset> dataset,
                               data::CacheLevel level, const DoctorOptions& options, LadderContext& context) {
  const int64_t needed = (options.warmup + options.steps + 1) * config.data.batch_size;
  data::CacheOptions cache;
  cache.set_level(level).set_max_samples(needed).set_fill_threads(std::max<int64_t>(1, context.cores));
  cache.set_max_bytes(options.memory_budget_bytes > 0 ? options.memory_budget_bytes
                                                      : static_cast<int64_t>(context.available_bytes / 2));
  cache.max_image_pixels = config.data.max_image_pixels;
  auto cached = std::make_shared<data::CachedDataset>(std::move(dataset), cache);
  context.fill_seconds += cached->fill_seconds();
  (level == data::CacheLevel::kDecoded ? context.full_decoded_cache_bytes : context.full_raw_cache_bytes) =
      cached->estimated_full_bytes();
  const std::string name = level == data::CacheLevel::kRaw ? "raw-cached" : "decoded-cached";
  STOKER_CHECK(cached->size() >= config.data.batch_size,
               "doctor: the {} cache holds {} samples, fewer than one batch of {}; give the doctor more memory "
               "(--memory-budget) or a smaller data.batch_size",
               name, cached->size(), config.data.batch_size);
  auto loader = make_loader(config, cached, trainer.device(), "train");
  RungResult r = measure_rung(name, trainer, *loader, options.warmup, options.steps);
  r.note = cache_note(*cached);
  return r;
}

// train.cudnn_benchmark as the ladder ran it. Its effect is not measured here: cuDNN keeps the plan
// it picked first for each shape (its plan cache ignores the flag), so an "off" rung in the same
// process would run the autotuner's plans, or the other way round, and read about 1.00x whatever
// the truth. A second process measures it: `trainer bench-step --set train.cudnn_benchmark=false`.
std::string cudnn_benchmark_note(const Config& config, torch::Device device) {
  if (!device.is_cuda()) return "";
  if (!at::globalContext().benchmarkCuDNN()) {
    return config.train.cudnn_benchmark ? "off (the batches vary in shape)" : "off (train.cudnn_benchmark: false)";
  }
  return "on; its effect is measured in a second process: trainer bench-step --config <recipe> --set "
         "train.cudnn_benchmark=false, against the same without the --set (cuDNN caches the first plan per shape, "
         "so one process cannot compare them)";
}

// What the ladder's diagnosis needs to know of the machine and the recipe.
LadderContext ladder_context(const Config& config, const doctor::Bench& bench) {
  LadderContext ctx;
  ctx.device = bench.device().str();
  ctx.batch_size = config.data.batch_size;
  ctx.workers = config.data.workers;
  ctx.cores = std::max(1u, std::thread::hardware_concurrency());
  ctx.torch_threads = torch::get_num_threads();
  ctx.available_bytes = available_memory_bytes(torch::kCPU);
  ctx.threads_follow_workers = config.run.threads == 0;
  ctx.precision = precision_name(config.train.precision);
  ctx.hardware = detect_hardware(bench.device()).summary();
  ctx.channels_last = config.train.channels_last;
  ctx.dataset_samples = bench.plan.train_set->size();
  ctx.data_type = config.data.dataset.type();
  ctx.data_root = config.data.root;
  ctx.channels = bench.plan.train_set->channels();
  ctx.out_side = std::max(bench.loader->out_height(), bench.loader->out_width());
  return ctx;
}

// The host-cached rung on CUDA; on the CPU a rung that says why it is not measured.
RungResult host_rung(const Config& config, const doctor::Bench& bench, const DoctorOptions& options) {
  if (!bench.device().is_cuda()) {
    RungResult r;
    r.name = "host-cached";
    r.measured = false;
    r.note = "on the CPU, host memory is the device's: this rung is the device-cached one";
    return r;
  }
  logger().info("doctor: host-cached rung");
  auto host = host_cached_source(config, bench.plan.train_set, *bench.loader, options.cached_batches);
  return measure_rung("host-cached", *bench.trainer, *host, options.warmup, options.steps);
}

// The full rung, its timeline recorded when options.trace_path is set.
RungResult full_rung(const doctor::Bench& bench, const DoctorOptions& options) {
  const bool traced = !options.trace_path.empty();
  if (traced) {
    trace::name_thread("training");
    trace::start();
  }
  RungResult r = measure_rung("full", *bench.trainer, *bench.loader, options.warmup, options.steps);
  if (traced) {
    trace::stop();
    trace::write(options.trace_path);
    logger().info("doctor: the full rung's timeline is in {} ({} events; open it in ui.perfetto.dev)",
                  options.trace_path, trace::event_count());
  }
  return r;
}

// Measures the ceiling again, last, keeps the faster of the two as rungs[0] (a machine whose speed
// changed during the ladder shows in ctx.ceiling_spread) and sets every rung's ratio to it.
void settle_ceiling(const doctor::Bench& bench, const DoctorOptions& options, LadderResult& result) {
  auto again = doctor::device_cached_source(*bench.loader, options.cached_batches);
  const RungResult last = measure_rung("device-cached", *bench.trainer, *again, options.warmup, options.steps);
  RungResult& first = result.rungs.front();
  result.context.ceiling_spread = std::abs(first.samples_per_s - last.samples_per_s) /
                                  std::max(first.samples_per_s, last.samples_per_s);
  if (last.samples_per_s > first.samples_per_s) first = last;
  if (doctor::faster_than_ceiling(result.rungs) != nullptr) {
    logger().info("doctor: a rung with more work measured faster than the device-cached one; measuring that once more");
    const RungResult third = measure_rung("device-cached", *bench.trainer, *again, options.warmup, options.steps);
    if (third.samples_per_s > first.samples_per_s) first = third;
  }
  doctor::take_slowed_ceiling(result);
  const double ceiling = first.samples_per_s;
  for (RungResult& r : result.rungs) r.ratio = r.measured && ceiling > 0 ? r.samples_per_s / ceiling : 0;
}

// The training step timed in each precision this device supports, channels-first and channels-last,
// on a synthetic batch of the recipe's shape; precisions without a fast path here are listed, not
// timed (bf16 on a CPU without oneDNN's bf16 path runs ATen's reference code: seconds per step).
std::vector<StepVariant> time_step_variants(const Config& config, const doctor::Bench& bench) {
  const HardwareFeatures hw = detect_hardware(bench.device());
  std::vector<Precision> precisions = {Precision::kFp32};
  if (bench.device().is_cuda() && hw.sm >= 80) precisions.push_back(Precision::kTf32);
  precisions.push_back(Precision::kBf16Mixed);
  if (bench.device().is_cuda() && hw.sm >= 70) precisions.push_back(Precision::kFp16Mixed);
  const data::InputShape shape = bench.loader->shape();
  std::vector<StepVariant> out;
  for (Precision p : precisions) {
    for (bool channels_last : {false, true}) {
      StepVariant v;
      v.precision = precision_name(p);
      v.channels_last = channels_last;
      const bool bf16_slow = p == Precision::kBf16Mixed && (bench.device().is_cpu() ? !hw.onednn_bf16 : hw.sm < 80);
      if (bf16_slow || !shape.fixed()) {
        v.measured = false;
        v.note = !shape.fixed() ? "not timed: the batches vary in shape" : "not timed: no fast bf16 path here";
      } else {
        v.ms = median_step_ms(bench.plan, p, channels_last);
      }
      out.push_back(v);
    }
  }
  return out;
}

}  // namespace

LadderResult run_ladder(const Config& recipe, const DoctorOptions& options) {
  STOKER_CHECK(options.steps > 0 && options.warmup >= 0 && options.cached_batches > 0,
               "doctor needs steps > 0, warmup >= 0 and cached_batches > 0");
  auto& log = logger();
  const doctor::Bench bench = doctor::make_bench(recipe);
  const Config& config = bench.config();
  LadderResult result;
  LadderContext& ctx = result.context;
  ctx = ladder_context(config, bench);

  log.info("doctor: device-cached rung ({} batches on {})", options.cached_batches, ctx.device);
  auto on_device = doctor::device_cached_source(*bench.loader, options.cached_batches);
  result.rungs.push_back(measure_rung("device-cached", *bench.trainer, *on_device, options.warmup, options.steps));
  ctx.cudnn_benchmark = cudnn_benchmark_note(config, bench.device());
  on_device.reset();
  result.rungs.push_back(host_rung(config, bench, options));
  log.info("doctor: decoded-cached rung");
  result.rungs.push_back(
      cached_dataset_rung(config, *bench.trainer, bench.plan.train_set, data::CacheLevel::kDecoded, options, ctx));
  log.info("doctor: raw-cached rung");
  result.rungs.push_back(
      cached_dataset_rung(config, *bench.trainer, bench.plan.train_set, data::CacheLevel::kRaw, options, ctx));
  log.info("doctor: full rung ({} worker(s))", config.data.workers);
  result.rungs.push_back(full_rung(bench, options));
  settle_ceiling(bench, options, result);
  result.diagnosis = diagnose(ctx, result.rungs);
  if (!result.diagnosis.input_bound) {
    // Compute-bound: the step itself is the bottleneck; time it in each precision and layout here.
    log.info("doctor: compute-bound; timing the step in each precision and layout this device supports");
    ctx.step_variants = time_step_variants(config, bench);
    result.diagnosis = diagnose(ctx, result.rungs);
  }
  return result;
}

}  // namespace stoker
