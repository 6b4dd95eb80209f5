// Learning-rate schedules (see schedule.h).
#include "optim/schedule.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace stoker {
namespace {

// Cosine annealing from `start` (pct 0) to `end` (pct 1), as torch's OneCycleLR._annealing_cos.
double anneal_cos(double start, double end, double pct) {
  return end + (start - end) / 2.0 * (std::cos(M_PI * pct) + 1.0);
}

// torch.optim.lr_scheduler.OneCycleLR (three_phase=False, anneal_strategy='cos'): from
// max_lr / div_factor up to max_lr at step pct_start * total - 1, then down to
// max_lr / div_factor / final_div_factor at the last step.
double one_cycle_lr(const ScheduleOptions& s, double max_lr, int64_t step, const ScheduleSpan& span) {
  const double initial = max_lr / s.div_factor;
  const double min_lr = initial / s.final_div_factor;
  const auto total = static_cast<double>(span.total);
  const double peak = s.pct_start * total - 1.0;  // phase 1's end step
  STOKER_CHECK(peak > 0, "schedule.pct_start ({}) of {} steps leaves no step to warm up in; raise "
               "schedule.pct_start or train.epochs",
               s.pct_start, span.total);
  const auto t = static_cast<double>(step);
  if (t <= peak) return anneal_cos(initial, max_lr, t / peak);
  // Past the last step (torch raises there) it stays at its floor.
  return anneal_cos(max_lr, min_lr, std::min(1.0, (t - peak) / (total - 1.0 - peak)));
}

// Cosine from base_lr (the first step after the warm-up) down to base_lr * final_lr_ratio (the
// last step), as CosineAnnealingLR with T_max = the steps after the warm-up - 1.
double cosine_lr(const ScheduleOptions& s, double base_lr, int64_t step, const ScheduleSpan& span) {
  const auto steps = static_cast<double>(std::max<int64_t>(1, span.total - span.warmup - 1));
  const double t = std::min(1.0, static_cast<double>(step - span.warmup) / steps);
  const double floor = base_lr * s.final_lr_ratio;
  return floor + (base_lr - floor) * 0.5 * (1.0 + std::cos(M_PI * t));
}

// base_lr * gamma^(the milestones, in epochs, reached), as MultiStepLR.
double step_lr(const ScheduleOptions& s, double base_lr, int64_t step, const ScheduleSpan& span) {
  int passed = 0;
  for (const int64_t m : s.milestones) passed += step >= m * span.steps_per_epoch;
  return base_lr * std::pow(s.gamma, passed);
}

}  // namespace

Registry<ScheduleType>& schedule_registry() {
  static Registry<ScheduleType>* registry = [] {
    auto* r = new Registry<ScheduleType>("schedule");
    r->add("constant", {[](const ScheduleOptions&, double lr, int64_t, const ScheduleSpan&) { return lr; }});
    r->add("cosine", {cosine_lr});
    r->add("step", {step_lr});
    r->add("one_cycle", {one_cycle_lr, /*own_warmup=*/true});
    return r;
  }();
  return *registry;
}

double scheduled_lr(const ScheduleOptions& s, double base_lr, int64_t step, int64_t steps_per_epoch,
                    int64_t epochs) {
  STOKER_CHECK(steps_per_epoch > 0 && epochs > 0 && step >= 0,
               "scheduled_lr: step {} of {} epochs of {} steps is out of range", step, epochs,
               steps_per_epoch);
  const ScheduleType type = schedule_registry().get(s.type);
  ScheduleSpan span;
  span.steps_per_epoch = steps_per_epoch;
  span.total = steps_per_epoch * epochs;
  if (!type.own_warmup) {
    span.warmup = static_cast<int64_t>(std::llround(s.warmup_epochs * static_cast<double>(steps_per_epoch)));
    if (step < span.warmup) return base_lr * static_cast<double>(step + 1) / static_cast<double>(span.warmup);
  }
  return type.lr(s, base_lr, step, span);
}


}  // namespace stoker
