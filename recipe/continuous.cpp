#include "recipe/continuous.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/error.h"
#include "common/log.h"
#include "recipe/device.h"

namespace stoker {

ContinuousPolicy ContinuousPolicy::from(const data::AutotuneWatch& watch, int64_t cores) {
  ContinuousPolicy p;
  p.starved_wait = watch.starved_wait;
  p.fed_wait = watch.fed_wait;
  p.starved_gpu_idle = watch.starved_gpu_idle;
  p.windows = watch.windows;
  p.cooldown = watch.cooldown;
  p.worse = watch.worse;
  p.max_workers = watch.max_workers > 0 ? watch.max_workers
                                        : std::max<int64_t>(1, std::min<int64_t>(8, 2 * std::max<int64_t>(1, cores)));
  return p;
}

ContinuousStep continuous_step(ContinuousState& s, const ContinuousPolicy& p, double data_wait,
                               double samples_per_s, std::optional<double> gpu_idle) {
  const int64_t cap = s.cap >= 0 ? std::min(s.cap, p.max_workers) : p.max_workers;
  ContinuousStep step{s.workers, ""};
  if (s.since_change >= 0) {  // judging the last change: no other until its cooldown is over
    s.after_sum += samples_per_s;
    if (++s.since_change < p.cooldown) return step;
    const double after = s.after_sum / static_cast<double>(s.since_change);
    s.since_change = -1;
    if (after >= p.worse * s.before) return step;
    step.why = fmt::format("workers {} -> {}: {} workers trained {:.1f} samples/s against {:.1f} before; {} stays "
                           "the most",
                           s.workers, s.previous, s.workers, after, s.before, s.previous);
    s.cap = s.previous;
    s.workers = step.workers = s.previous;
    return step;
  }
  const bool idle_starved = gpu_idle && *gpu_idle > p.starved_gpu_idle && data_wait >= p.fed_wait;
  if (data_wait > p.starved_wait || idle_starved) {
    ++s.streak;
    s.streak_samples += samples_per_s;
  } else if (data_wait < p.fed_wait && !idle_starved) {
    s.streak = 0;
    s.streak_samples = 0;
  }
  if (s.streak < p.windows || s.workers >= cap) return step;
  s.previous = s.workers;
  s.before = s.streak_samples / static_cast<double>(s.streak);
  s.workers = step.workers = std::min(cap, std::max<int64_t>(1, 2 * s.workers));
  step.why = fmt::format("workers {} -> {}: the step waited for data over {:.0f}% of the time{} for {} windows ({:.1f} "
                         "samples/s)",
                         s.previous, s.workers, 100 * p.starved_wait,
                         gpu_idle ? fmt::format(" or the GPU sat idle over {:.0f}%", 100 * p.starved_gpu_idle) : "",
                         s.streak, s.before);
  s.streak = 0;
  s.streak_samples = 0;
  s.since_change = 0;
  s.after_sum = 0;
  return step;
}

ContinuousWorkers::ContinuousWorkers(std::shared_ptr<data::RetunableLoader> loader, ContinuousPolicy policy,
                                     int64_t window_steps, int64_t run_threads, bool on_cpu)
    : loader_(std::move(loader)), policy_(policy), window_steps_(std::max<int64_t>(1, window_steps)),
      run_threads_(run_threads), on_cpu_(on_cpu) {
  STOKER_CHECK(loader_ != nullptr, "ContinuousWorkers needs a loader");
  state_.workers = loader_->options().workers;
}

void ContinuousWorkers::on_train_step_end(Trainer& trainer, const StepInfo& step) {
  observe(step, [&trainer] { return trainer.take_gpu_idle(); });
}

std::string ContinuousWorkers::observe(const StepInfo& step, const std::function<std::optional<double>()>& gpu_idle) {
  ++steps_;
  samples_ += step.samples;
  wait_seconds_ += step.data_seconds;
  step_seconds_ += step.step_seconds;
  if (steps_ < window_steps_ || step_seconds_ <= 0) return "";
  const double wait = wait_seconds_ / step_seconds_;
  const double rate = static_cast<double>(samples_) / step_seconds_;
  steps_ = samples_ = 0;
  wait_seconds_ = step_seconds_ = 0;
  const ContinuousStep change = continuous_step(state_, policy_, wait, rate, gpu_idle ? gpu_idle() : std::nullopt);
  if (change.why.empty()) return "";
  loader_->set_workers(change.workers, loader_->options().prefetch_factor);
  configure_threads(run_threads_, change.workers, on_cpu_);
  logger().info("data.autotune: continuous: at step {}: {}", step.step, change.why);
  return change.why;
}

}  // namespace stoker
