// Learning-rate schedules (see schedule.h).
#include "trainer/schedule.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace stoker {
namespace {

// Cosine annealing from `start` (pct 0) to `end` (pct 1), as torch's OneCycleLR._annealing_cos.
double anneal_cos(double start, double end, double pct) {
  return end + (start - end) / 2.0 * (std::cos(M_PI * pct) + 1.0);
}

// torch.optim.lr_scheduler.OneCycleLR (three_phase=False, anneal_strategy='cos') at `step` of
// `total`: from max_lr / div_factor up to max_lr at step pct_start * total - 1, then down to
// max_lr / div_factor / final_div_factor at the last step.
double one_cycle_lr(const ScheduleOptions& s, double max_lr, int64_t step, int64_t total) {
  const double initial = max_lr / s.div_factor;
  const double min_lr = initial / s.final_div_factor;
  const double peak = s.pct_start * static_cast<double>(total) - 1.0;  // phase 1's end step
  STOKER_CHECK(peak > 0, "schedule.pct_start ({}) of {} steps leaves no step to warm up in; raise "
               "schedule.pct_start or train.epochs",
               s.pct_start, total);
  const double t = static_cast<double>(step);
  if (t <= peak) return anneal_cos(initial, max_lr, t / peak);
  // Past the last step (torch raises there) it stays at its floor.
  return anneal_cos(max_lr, min_lr, std::min(1.0, (t - peak) / (static_cast<double>(total) - 1.0 - peak)));
}

}  // namespace

double scheduled_lr(const ScheduleOptions& s, double base_lr, int64_t step, int64_t steps_per_epoch,
                    int64_t epochs) {
  STOKER_CHECK(steps_per_epoch > 0 && epochs > 0 && step >= 0,
               "scheduled_lr: step {} of {} epochs of {} steps is out of range", step, epochs,
               steps_per_epoch);
  const int64_t total = steps_per_epoch * epochs;
  if (s.type == "one_cycle") return one_cycle_lr(s, base_lr, step, total);

  const auto warmup = static_cast<int64_t>(std::llround(s.warmup_epochs * static_cast<double>(steps_per_epoch)));
  if (step < warmup) return base_lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (s.type == "constant") return base_lr;
  if (s.type == "step") {
    int passed = 0;
    for (const int64_t m : s.milestones) passed += step >= m * steps_per_epoch;
    return base_lr * std::pow(s.gamma, passed);
  }
  STOKER_CHECK(s.type == "cosine", "schedule.type '{}' is not known; use constant, cosine, step or one_cycle",
               s.type);
  // cosine from base_lr (first step after warm-up) down to base_lr * final_lr_ratio (last step).
  const double span = static_cast<double>(std::max<int64_t>(1, total - warmup - 1));
  const double t = std::min(1.0, static_cast<double>(step - warmup) / span);
  const double floor = base_lr * s.final_lr_ratio;
  return floor + (base_lr - floor) * 0.5 * (1.0 + std::cos(M_PI * t));
}

int64_t global_batch_size(const Config& config) {
  return config.data.batch_size * config.data.shard_count;
}

double effective_lr(const Config& config) {
  const int64_t reference = config.optimizer.lr_reference_batch;
  if (reference <= 0) return config.optimizer.lr;
  return config.optimizer.lr * static_cast<double>(global_batch_size(config)) / static_cast<double>(reference);
}

}  // namespace stoker
