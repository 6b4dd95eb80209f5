// `trainer doctor --tune` and `--batch`: the loader's settings and the batch size, searched by
// measuring the training step, not guessed.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <torch/torch.h>

#ifdef STOKER_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include "common/error.h"
#include "common/hardware.h"
#include "data/cache.h"
#include "doctor/decisions.h"
#include "doctor/doctor.h"
#include "doctor/detail.h"
#include "recipe/device.h"
#include "recipe/factory.h"
#include "common/log.h"
#include "recipe/run.h"
#include "trainer/callbacks.h"

namespace stoker {

const char* data_cache_name(data::DataCache cache) {
  return cache == data::DataCache::kNone ? "none" : data::cache_level_name(data::cache_level_of(cache));
}

namespace {

using clock_type = std::chrono::steady_clock;
double since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

constexpr double kWithinCeiling = 0.98;  // stop tuning within 2% of the ceiling
constexpr double kBetter = 1.02;         // a trial must be 2% faster to replace the best (noise)

// Tuning state: the data set, the trainer every trial steps, what was tried, the clock.
struct Tuner {
  Tuner(const RunPlan& plan, const TuneOptions& o) : bench(doctor::make_bench(plan)), config(bench.config()), options(o) {}
  doctor::Bench bench;   // its loader has the starting settings
  const Config& config;  // the recipe, resolved for the device (bench.plan.config)
  const TuneOptions& options;
  TuneResult result;
  clock_type::time_point start = clock_type::now();

  bool out_of_time() const { return since(start) >= result.budget_seconds; }
  bool at_ceiling() const {
    return !result.ceiling_unsteady && result.best.samples_per_s >= kWithinCeiling * result.ceiling_samples_per_s;
  }
  bool tried(const TuneTrial& t) const {
    return std::any_of(result.trials.begin(), result.trials.end(), [&](const TuneTrial& o) {
      return o.workers == t.workers && o.prefetch_factor == t.prefetch_factor && o.device_prefetch == t.device_prefetch &&
             o.cache == t.cache;
    });
  }

  // Measures the full pipeline with `t`'s settings (the model's threads set as training would).
  TuneTrial run(TuneTrial t) {
    check_stop_requested("tuning the loader (data.autotune: start, doctor --tune)");
    Config c = config;
    c.data.workers = t.workers;
    c.data.prefetch_factor = t.prefetch_factor;
    c.data.device_prefetch = t.device_prefetch;
    c.data.cache = t.cache;
    std::shared_ptr<data::Dataset> dataset = bench.plan.train_set;
    if (t.cache != data::DataCache::kNone && !(dataset = cached(t))) {
      result.trials.push_back(t);  // not measured: t.note says why
      return t;
    }
    configure_threads(c.run.threads, c.data.workers, bench.device().is_cpu());
    auto loader = make_loader(c, dataset, bench.device(), "train", false, data_ranks(bench.plan));
    const RungResult r = doctor::measure_rung("full", *bench.trainer, *loader, options.warmup, options.steps);
    t.samples_per_s = r.samples_per_s;
    t.wait_share = r.wait_share;
    result.trials.push_back(t);
    logger().info("doctor --tune: workers {}, prefetch_factor {}, device_prefetch {}, cache {}: {:.1f} samples/s",
                  t.workers, t.prefetch_factor, t.device_prefetch, data_cache_name(t.cache), t.samples_per_s);
    if (t.samples_per_s > kBetter * result.best.samples_per_s) result.best = t;
    return t;
  }

  // The samples the trial's timed steps read, cached at `t.cache`'s level; null (with t.note saying
  // why) when a cache of the whole split would not fit the memory budget.
  std::shared_ptr<data::Dataset> cached(TuneTrial& t) {
    const auto budget = static_cast<double>(
        options.memory_budget_bytes > 0 ? options.memory_budget_bytes : available_memory_bytes(torch::kCPU) / 2);
    data::CacheOptions o;
    o.set_level(data::cache_level_of(t.cache))
        .set_max_samples((options.warmup + options.steps + 1) * config.data.batch_size)
        .set_fill_threads(std::max(1u, std::thread::hardware_concurrency()));
    o.max_image_pixels = config.data.max_image_pixels;
    auto cache = std::make_shared<data::CachedDataset>(bench.plan.train_set, o);
    const double whole = cache->estimated_full_bytes();
    if (whole > budget) {
      t.measured = false;
      t.note = fmt::format("not tried: the whole split would take {:.2f} GB, over the budget of {:.2f} GB", whole / 1e9,
                           budget / 1e9);
      logger().info("doctor --tune: data.cache {} {}", data_cache_name(t.cache), t.note);
      return nullptr;
    }
    t.note = fmt::format("the whole split: {:.2f} GB in memory", whole / 1e9);
    return cache;
  }
  // Tries `t` unless it was tried or the search is over; returns whether it ran.
  bool attempt(const TuneTrial& t) {
    if (tried(t) || out_of_time() || at_ceiling()) return false;
    run(t);
    return true;
  }
};

int64_t max_workers(const TuneOptions& o) {
  if (o.max_workers > 0) return o.max_workers;
  return std::min<int64_t>(32, 2 * std::max(1u, std::thread::hardware_concurrency()));
}

// Workers: doubling from 1 while it pays, then halfway between the best and its neighbours.
void search_workers(Tuner& t) {
  const int64_t most = max_workers(t.options);
  if (t.result.on_cpu && t.result.best.workers > 0) {
    // On the CPU the loader's threads compete with the step for the cores: none may be fastest. Tried
    // even when the start measured at the ceiling: the step's threads change with the workers here,
    // and a small model can step faster on the start's fewer threads than the ceiling's.
    TuneTrial trial = t.result.best;
    trial.workers = 0;
    if (!t.tried(trial) && !t.out_of_time()) t.run(trial);
  }
  int64_t previous_best = -1;
  for (int64_t w = 1; w <= most && !t.out_of_time() && !t.at_ceiling(); w *= 2) {
    TuneTrial trial = t.result.best;
    trial.workers = w;
    t.attempt(trial);
    // Past the peak: the last doubling did not improve on the best.
    if (t.result.best.workers == previous_best && w > t.result.best.workers) break;
    previous_best = t.result.best.workers;
  }
  const int64_t best = t.result.best.workers;
  for (int64_t w : {best + std::max<int64_t>(1, best / 2), best - std::max<int64_t>(1, best / 4)}) {
    if (w < 0 || w > most) continue;
    TuneTrial trial = t.result.best;
    trial.workers = w;
    t.attempt(trial);
  }
}

void search_prefetch(Tuner& t) {
  if (t.result.best.workers > 0) {
    for (int64_t f : {4, 1}) {
      TuneTrial trial = t.result.best;
      trial.prefetch_factor = f;
      t.attempt(trial);
    }
  }
  if (!t.bench.device().is_cuda()) return;
  for (int64_t d : {4, 1}) {
    TuneTrial trial = t.result.best;
    trial.device_prefetch = d;
    t.attempt(trial);
  }
}

// data.cache, when the loader settings leave the step waiting: raw (reads gone), then decoded (decoding
// gone too), each with the best loader settings so far.
void search_cache(Tuner& t) {
  if (t.config.data.cache != data::DataCache::kNone) return;
  for (data::DataCache level : {data::DataCache::kRaw, data::DataCache::kDecoded}) {
    TuneTrial trial = t.result.best;
    trial.cache = level;
    trial.note.clear();
    t.attempt(trial);
  }
}

}  // namespace

namespace {

// The step on cached device batches. On the CPU with the threads it would have without loader
// workers (every core): the ceiling of any setting, the no-worker trial included.
double measure_ceiling(Tuner& t) {
  configure_threads(t.config.run.threads, 0, t.bench.device().is_cpu());
  auto on_device = doctor::device_cached_source(*t.bench.loader, 4);
  return doctor::measure_rung("device-cached", *t.bench.trainer, *on_device, t.options.warmup, t.options.steps)
      .samples_per_s;
}

// A full pipeline measured well above the ceiling means the ceiling's measurement was slowed (another
// process on the machine): it is measured once more, and the faster kept, so that the search does not
// stop "at the ceiling" before it started.
void check_ceiling(Tuner& t) {
  if (t.result.start.samples_per_s <= 1.1 * t.result.ceiling_samples_per_s) return;
  const double again = measure_ceiling(t);
  logger().info("doctor --tune: the starting settings measured {:.1f} samples/s, above the device-cached ceiling of "
                "{:.1f}; measured again: {:.1f}", t.result.start.samples_per_s, t.result.ceiling_samples_per_s, again);
  t.result.ceiling_samples_per_s = std::max(t.result.ceiling_samples_per_s, again);
  // Still below the starting settings: the machine is too busy for the ceiling to bound anything, and
  // the search tries all its candidates instead of stopping at it.
  t.result.ceiling_unsteady = t.result.start.samples_per_s > 1.1 * t.result.ceiling_samples_per_s;
}

}  // namespace

TuneResult tune(const Config& config, const TuneOptions& options) {
  const RunPlan plan = resolve_plan(config);
  plan.precision.log();
  return tune(plan, options);
}

TuneResult tune(const RunPlan& plan, const TuneOptions& options) {
  STOKER_CHECK(options.budget_seconds > 0 && options.steps > 0, "doctor --tune needs a positive budget and steps");
  Tuner t(plan, options);
  t.result.on_cpu = plan.device.is_cpu();
  t.result.budget_seconds = options.budget_seconds;
  t.result.ceiling_samples_per_s = measure_ceiling(t);
  TuneTrial start;
  start.workers = t.config.data.workers;
  start.prefetch_factor = t.config.data.prefetch_factor;
  start.device_prefetch = t.config.data.device_prefetch;
  start.cache = t.config.data.cache;
  t.result.best = start;  // samples_per_s 0: the start's measurement replaces it
  t.result.start = t.run(start);
  check_ceiling(t);
  if (options.run_epochs > 0) {
    t.result.estimated_run_seconds = options.run_epochs * static_cast<double>(t.bench.plan.train_set->size()) /
                                     std::max(1e-9, t.result.start.samples_per_s);
    t.result.budget_seconds = autotune_budget(options.budget_seconds, options.max_share, t.result.estimated_run_seconds);
  }
  search_workers(t);
  search_prefetch(t);
  search_cache(t);
  t.result.seconds = since(t.start);
  t.result.reached_ceiling = t.at_ceiling();
  return t.result;
}

std::string TuneResult::set_line() const {
  std::string line = fmt::format("--set data.workers={} --set data.prefetch_factor={} --set data.device_prefetch={}",
                                 best.workers, best.prefetch_factor, best.device_prefetch);
  if (best.cache != start.cache) line += fmt::format(" --set data.cache={}", data_cache_name(best.cache));
  return line;
}

std::string TuneResult::yaml() const {
  std::string yaml = fmt::format("data:\n  workers: {}\n  prefetch_factor: {}\n  device_prefetch: {}\n", best.workers,
                                 best.prefetch_factor, best.device_prefetch);
  if (best.cache != start.cache) yaml += fmt::format("  cache: {}\n", data_cache_name(best.cache));
  return yaml;
}

std::string format_tune(const TuneResult& r) {
  std::string out = fmt::format("tune: {} trials in {:.1f} s; ceiling (device-cached) {:.1f} samples/s\n",
                                r.trials.size(), r.seconds, r.ceiling_samples_per_s);
  out += fmt::format("{:>8} {:>9} {:>9} {:>8} {:>10} {:>6} {:>6}\n", "workers", "prefetch", "dev_pref", "cache",
                     "samples/s", "ratio", "wait");
  for (const TuneTrial& t : r.trials) {
    const char* cache = data_cache_name(t.cache);
    if (!t.measured) {
      out += fmt::format("{:>8} {:>9} {:>9} {:>8}  {}\n", t.workers, t.prefetch_factor, t.device_prefetch, cache, t.note);
      continue;
    }
    out += fmt::format("{:>8} {:>9} {:>9} {:>8} {:>10.1f} {:>6.2f} {:>5.0f}%{}\n", t.workers, t.prefetch_factor,
                       t.device_prefetch, cache, t.samples_per_s, t.samples_per_s / r.ceiling_samples_per_s,
                       100 * t.wait_share, t.note.empty() ? "" : "  (" + t.note + ")");
  }
  out += fmt::format("best: {:.1f} samples/s ({:.2f}x the starting settings, {:.2f} of the ceiling{})\n",
                     r.best.samples_per_s, r.best.samples_per_s / std::max(1e-9, r.start.samples_per_s),
                     r.best.samples_per_s / r.ceiling_samples_per_s,
                     r.reached_ceiling ? "; stopped within 2% of it" : "");
  if (r.ceiling_unsteady) {
    out += "note: the device-cached ceiling measured below the starting settings twice: something else used this "
           "machine meanwhile; the search tried every candidate instead of stopping at the ceiling, and the numbers "
           "above are that uncertain\n";
  }
  if (const std::string advice = r.advice(); !advice.empty()) out += advice + "\n";
  out += "as flags: " + r.set_line() + "\nas YAML:\n" + r.yaml();
  return out;
}

std::string TuneResult::advice() const {
  if (!on_cpu || best.workers >= start.workers || best.samples_per_s <= start.samples_per_s) return "";
  return fmt::format("give the cores back to the step: it trains on the CPU, and {} loader worker(s) took cores from "
                     "it; {} worker(s){} trained {:.2f}x faster",
                     start.workers, best.workers, best.workers == 0 ? " (batches built on the training thread)" : "",
                     best.samples_per_s / std::max(1e-9, start.samples_per_s));
}

// ---- the batch-size sweep ------------------------------------------------------------------------------

namespace {

// Trains device-cached steps at one batch size with a fresh model.
BatchTrial try_batch(const Config& base, std::shared_ptr<data::Dataset> dataset, torch::Device device,
                     const BatchSweepOptions& o, int64_t batch) {
  Config c = base;
  c.data.batch_size = batch;
  BatchTrial trial;
  trial.batch_size = batch;
  trial.lr = rescale_lr(base, batch).lr;
  reset_peak_memory(device);
  auto loader = make_loader(c, std::move(dataset), device, "train");
  auto cached = doctor::device_cached_source(*loader, 2);
  auto trainer = make_trainer(c, make_model(c, loader->shape()), loader, loader, device);
  // With train.cuda_graph the warm-up must cover the graph's warm-up steps and its capture, or the
  // timed steps would include them.
  const bool graph = c.train.cuda_graph && device.is_cuda();
  const RungResult r =
      doctor::measure_rung("device-cached", *trainer, *cached, graph ? std::max<int64_t>(o.warmup, 6) : o.warmup, o.steps);
  trial.samples_per_s = r.samples_per_s;
  trial.peak_bytes = peak_memory_bytes(device);
  if (graph && !trainer->graph_active()) {
    // The capture failed (the warning says why): at this size the step does not fit as a graph.
    trial.fits = false;
    trial.note = "the CUDA graph capture failed (it needs the working set a second time)";
  }
  return trial;
}

}  // namespace

BatchSweepResult batch_sweep(const Config& recipe, const BatchSweepOptions& o) {
  STOKER_CHECK(o.min_batch > 0 && o.max_batch >= o.min_batch, "doctor --batch needs 0 < min_batch <= max_batch");
  const RunPlan plan = resolve_plan(recipe);
  plan.precision.log();
  const torch::Device device = plan.device;
  configure_threads(recipe.run.threads, 0, device.is_cpu());  // no loader workers: every core steps
  const std::shared_ptr<data::Dataset> dataset = plan.train_set;
  const Config& config = plan.config;
  const double budget = o.memory_budget_bytes > 0 ? static_cast<double>(o.memory_budget_bytes)
                                                  : available_memory_bytes(torch::kCPU) / 2;
  BatchSweepResult result;
  const auto start = clock_type::now();
  for (int64_t batch = o.min_batch; batch <= o.max_batch; batch *= 2) {
    if (batch * 2 > dataset->size()) {
      result.stopped_because = fmt::format("the training split has {} samples, too few for batch {} twice",
                                           dataset->size(), batch);
      break;
    }
    BatchTrial trial;
    try {
      trial = try_batch(config, dataset, device, o, batch);
    } catch (const std::exception& e) {
      if (!is_out_of_memory(e)) throw;
      trial.batch_size = batch;
      trial.fits = false;
      trial.note = "out of device memory";
#ifdef STOKER_WITH_CUDA
      c10::cuda::CUDACachingAllocator::emptyCache();
#endif
    }
    if (trial.fits && device.is_cpu() && trial.peak_bytes > budget) {
      trial.fits = false;
      trial.note = fmt::format("peak memory {:.1f} GB is over the budget of {:.1f} GB", trial.peak_bytes / 1e9, budget / 1e9);
    }
    result.trials.push_back(trial);
    logger().info("doctor --batch: batch {}: {}", batch,
                  trial.fits ? fmt::format("{:.1f} samples/s", trial.samples_per_s) : trial.note);
    if (!trial.fits) {
      result.stopped_because = fmt::format("batch {} does not fit: {}", batch, trial.note);
      break;
    }
    if (since(start) >= o.budget_seconds) {
      result.stopped_because = fmt::format("the time budget of {:.0f} s is spent", o.budget_seconds);
      break;
    }
  }
  if (result.stopped_because.empty()) result.stopped_because = fmt::format("reached --max-batch {}", o.max_batch);
  double best = 0;
  for (const BatchTrial& t : result.trials) {
    if (t.fits && t.samples_per_s > best) {
      best = t.samples_per_s;
      result.best_batch = t.batch_size;
    }
  }
  return result;
}

std::string format_batch_sweep(const Config& config, const BatchSweepResult& r, const BatchChoice& choice) {
  std::string out = fmt::format("batch sweep (device-cached steps; optimizer.lr {:.4g} at batch {}, rescaled per size "
                                "by the recipe's rule):\n",
                                config.optimizer.lr, config.data.batch_size);
  out += fmt::format("{:>7} {:>10} {:>12} {:>10}  {}\n", "batch", "samples/s", "peak memory", "lr", "");
  for (const BatchTrial& t : r.trials) {
    std::string mark = t.fits ? "" : t.note;
    if (t.fits && t.batch_size == choice.batch_size) mark = "<- knee";
    if (t.fits && t.batch_size == r.best_batch) mark += mark.empty() ? "<- fastest" : ", fastest";
    out += fmt::format("{:>7} {:>10} {:>9.1f} MB {:>10.4g}  {}\n", t.batch_size,
                       t.fits ? fmt::format("{:.1f}", t.samples_per_s) : "-", t.peak_bytes / 1e6, t.lr, mark);
  }
  out += fmt::format("stopped: {}\n", r.stopped_because);
  for (const std::string& line : choice.lines) out += line + "\n";
  if (choice.batch_size > 0) {
    out += fmt::format("knee: {} (check accuracy: larger batches may need warm-up and more epochs)\n",
                       choice.set_line());
  }
  return out;
}

}  // namespace stoker
