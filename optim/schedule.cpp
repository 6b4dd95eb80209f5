// Learning-rate schedules (see schedule.h).
#include "optim/schedule.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

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
double one_cycle_lr(const TypeOptions& own, double max_lr, int64_t step, const ScheduleSpan& span) {
  const auto& s = dynamic_cast<const OneCycleKeys&>(own);
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
double cosine_lr(const TypeOptions& own, double base_lr, int64_t step, const ScheduleSpan& span) {
  const auto& s = dynamic_cast<const CosineKeys&>(own);
  const auto steps = static_cast<double>(std::max<int64_t>(1, span.total - span.warmup - 1));
  const double t = std::min(1.0, static_cast<double>(step - span.warmup) / steps);
  const double floor = base_lr * s.final_lr_ratio;
  return floor + (base_lr - floor) * 0.5 * (1.0 + std::cos(M_PI * t));
}

// base_lr * gamma^(the milestones, in epochs, reached), as MultiStepLR.
double step_lr(const TypeOptions& own, double base_lr, int64_t step, const ScheduleSpan& span) {
  const auto& s = dynamic_cast<const StepKeys&>(own);
  int passed = 0;
  for (const int64_t m : s.milestones) passed += step >= m * span.steps_per_epoch;
  return base_lr * std::pow(s.gamma, passed);
}

std::string describe_cosine(const TypeOptions& own) {
  return fmt::format("cosine down to {:g} x lr", dynamic_cast<const CosineKeys&>(own).final_lr_ratio);
}

std::string describe_step(const TypeOptions& own) {
  const auto& s = dynamic_cast<const StepKeys&>(own);
  return fmt::format("step: lr x {:g} at epoch(s) {}", s.gamma, fmt::join(s.milestones, ", "));
}

std::string describe_one_cycle(const TypeOptions& own) {
  const auto& s = dynamic_cast<const OneCycleKeys&>(own);
  return fmt::format("one_cycle: lr / {:g} up to lr over {:g} of the steps, then down to lr / {:g}", s.div_factor,
                     s.pct_start, s.div_factor * s.final_div_factor);
}

// The step schedule's milestones against the run's length (StepKeys::check checks them on their own).
void check_step_run(const TypeOptions& own, double warmup_epochs, int64_t epochs) {
  const auto& milestones = dynamic_cast<const StepKeys&>(own).milestones;
  for (size_t i = 0; i < milestones.size(); ++i) {
    if (milestones[i] >= epochs || static_cast<double>(milestones[i]) < warmup_epochs) {
      STOKER_FAIL("schedule.milestones[{}] ({}) must be within the run: at least schedule.warmup_epochs ({}) and "
                  "below train.epochs ({})",
                  i, milestones[i], warmup_epochs, epochs);
    }
  }
}

}  // namespace

void CosineKeys::visit(OptionsVisitor& v) { v.field("final_lr_ratio", final_lr_ratio, rules::unit_closed()); }

void StepKeys::visit(OptionsVisitor& v) {
  v.field("milestones", milestones, rules::items(rules::at_least(1), 0));
  v.field("gamma", gamma, rules::number("a number in (0, 1]", 0, 1, true));
}

void StepKeys::check() const {
  if (milestones.empty()) STOKER_FAIL("milestones must list at least one epoch, e.g. milestones: [30, 60, 80]");
  for (size_t i = 1; i < milestones.size(); ++i) {
    if (milestones[i] <= milestones[i - 1]) {
      STOKER_FAIL("milestones must increase: {} after {} at [{}]", milestones[i], milestones[i - 1], i);
    }
  }
}

void OneCycleKeys::visit(OptionsVisitor& v) {
  v.field("pct_start", pct_start, rules::number("a number in (0, 1)", 0, 1, true, true));
  v.field("div_factor", div_factor, rules::number("a number >= 1", 1));
  v.field("final_div_factor", final_div_factor, rules::number("a number >= 1", 1));
}

ScheduleOptions make_schedule(const std::string& type) {
  ScheduleOptions s;
  s.curve = TypedOptions(type, schedule_registry().get(type).options());
  return s;
}

namespace {

void add_stoker_schedules(Registry<ScheduleType>& r) {
  r.add("constant", {options_of<NoOptions>(),
                     [](const TypeOptions&, double lr, int64_t, const ScheduleSpan&) { return lr; }});
  r.add("cosine", {options_of<CosineKeys>(), cosine_lr, /*own_warmup=*/false, describe_cosine});
  r.add("step", {options_of<StepKeys>(), step_lr, /*own_warmup=*/false, describe_step, check_step_run});
  r.add("one_cycle", {options_of<OneCycleKeys>(), one_cycle_lr, /*own_warmup=*/true, describe_one_cycle,
                      nullptr, "pct_start"});
}

}  // namespace

Registry<ScheduleType>& schedule_registry() { return lazy_registry<ScheduleType, add_stoker_schedules>("schedule"); }

std::string describe_schedule(const ScheduleOptions& s) {
  const std::string& name = s.curve.type();
  const ScheduleType& type = schedule_registry().get(name);
  const std::string curve = type.describe ? type.describe(s.curve.options()) : name;
  if (type.own_warmup || s.warmup_epochs <= 0) return curve;
  return fmt::format("{:g} warm-up epoch(s), then {}", s.warmup_epochs, curve);
}

double scheduled_lr(const ScheduleOptions& s, double base_lr, int64_t step, int64_t steps_per_epoch,
                    int64_t epochs) {
  STOKER_CHECK(steps_per_epoch > 0 && epochs > 0 && step >= 0,
               "scheduled_lr: step {} of {} epochs of {} steps is out of range", step, epochs,
               steps_per_epoch);
  const ScheduleType type = schedule_registry().get(s.curve.type());
  ScheduleSpan span;
  span.steps_per_epoch = steps_per_epoch;
  span.total = steps_per_epoch * epochs;
  if (!type.own_warmup) {
    span.warmup = static_cast<int64_t>(std::llround(s.warmup_epochs * static_cast<double>(steps_per_epoch)));
    if (step < span.warmup) return base_lr * static_cast<double>(step + 1) / static_cast<double>(span.warmup);
  }
  return type.lr(s.curve.options(), base_lr, step, span);
}


}  // namespace stoker
