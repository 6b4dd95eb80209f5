// data.autotune: start (autotune.h): the doctor's tune before a run's first epoch, its winner applied.
#include "doctor/autotune.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "recipe/device.h"

namespace stoker {
namespace {

// "workers 0 -> 2" or "workers 2" (unchanged), for the line.
template <typename T>
std::string from_to(const char* key, const T& before, const T& after) {
  return before == after ? fmt::format("{} {}", key, after) : fmt::format("{} {} -> {}", key, before, after);
}

std::string minutes(double seconds) {
  return seconds >= 90 ? fmt::format("{:.0f} min", seconds / 60) : fmt::format("{:.0f} s", seconds);
}

}  // namespace

Config apply_tuned(const Config& config, const TuneResult& r) {
  Config c = config;
  c.data.workers = r.best.workers;
  c.data.prefetch_factor = r.best.prefetch_factor;
  c.data.device_prefetch = r.best.device_prefetch;
  c.data.cache = r.best.cache;
  return c;
}

std::string autotune_line(const Config& config, const TuneResult& r) {
  const TuneTrial& a = r.start;
  const TuneTrial& b = r.best;
  std::string budget = fmt::format("budget {:.1f} s", r.budget_seconds);
  if (r.estimated_run_seconds > 0 && r.budget_seconds < config.data.autotune_budget_s) {
    budget += fmt::format(": {:.0f}% of a run estimated at {}", 100 * config.data.autotune_max_share,
                          minutes(r.estimated_run_seconds));
  }
  return fmt::format("data.autotune: {}: {}, {}, {}, {}: {:.1f} -> {:.1f} samples/s ({:.2f} of the device-cached "
                     "ceiling of {:.1f}); {} trial(s) in {:.1f} s ({}{})",
                     config.data.autotune, from_to("workers", a.workers, b.workers),
                     from_to("prefetch_factor", a.prefetch_factor, b.prefetch_factor),
                     from_to("device_prefetch", a.device_prefetch, b.device_prefetch),
                     from_to("cache", std::string(data_cache_name(a.cache)), std::string(data_cache_name(b.cache))),
                     a.samples_per_s, b.samples_per_s, b.samples_per_s / std::max(1e-9, r.ceiling_samples_per_s),
                     r.ceiling_samples_per_s, r.trials.size(), r.seconds, budget,
                     r.reached_ceiling ? "; stopped within 2% of the ceiling" : "");
}

std::string autotune_json(const Config& config, const TuneResult& r) {
  nlohmann::ordered_json json;
  json["device"] = resolve_device(config.run.device).str();
  json["batch_size"] = config.data.batch_size;
  json["workers"] = r.best.workers;
  const double ceiling = r.ceiling_samples_per_s;
  json["device_cached_samples_per_s"] = ceiling;
  json["device_cached_ratio"] = 1.0;
  json["full_samples_per_s"] = r.best.samples_per_s;
  json["full_ratio"] = r.best.samples_per_s / std::max(1e-9, ceiling);
  json["full_wait_share"] = r.best.wait_share;
  json["input_bound"] = r.best.samples_per_s < 0.9 * ceiling;
  json["autotune"] = config.data.autotune;
  json["autotune_start_samples_per_s"] = r.start.samples_per_s;
  json["autotune_best_samples_per_s"] = r.best.samples_per_s;
  json["autotune_prefetch_factor"] = r.best.prefetch_factor;
  json["autotune_device_prefetch"] = r.best.device_prefetch;
  json["autotune_cache"] = std::string(data_cache_name(r.best.cache));
  json["autotune_trials"] = r.trials.size();
  json["autotune_seconds"] = r.seconds;
  json["autotune_budget_seconds"] = r.budget_seconds;
  json["diagnosis"] = autotune_line(config, r) + "\n" + format_tune(r);
  return json.dump() + "\n";
}

AutotuneOutcome autotune_at_start(const RunPlan& plan) {
  const Config& config = plan.config;
  TuneOptions o;
  o.budget_seconds = config.data.autotune_budget_s;
  o.max_share = config.data.autotune_max_share;
  o.run_epochs = static_cast<double>(config.train.epochs);
  o.steps = 12;  // shorter trials than the doctor's: the run pays for them
  o.warmup = 3;
  logger().info("data.autotune: {}: tuning the loader's settings (at most {:.0f} s and {:.0f}% of the run)",
                config.data.autotune, o.budget_seconds, 100 * o.max_share);
  const TuneResult r = tune(plan, o);
  AutotuneOutcome out;
  out.config = apply_tuned(config, r);
  out.line = autotune_line(config, r);
  out.doctor_json = autotune_json(config, r);
  return out;
}

}  // namespace stoker
