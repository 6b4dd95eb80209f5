// Learning-rate schedules: the curves' shapes, and every curve against PyTorch's own schedulers
// (checked-in golden values, tests/golden/schedule_golden.h, written by
// tests/golden/schedule_golden.py).
#include "optim/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "golden/schedule_golden.h"
#include "test_util.h"

namespace stoker {
namespace {

std::vector<double> curve(const ScheduleOptions& s, double lr, int64_t steps_per_epoch, int64_t epochs) {
  std::vector<double> out;
  for (int64_t i = 0; i < steps_per_epoch * epochs; ++i) out.push_back(scheduled_lr(s, lr, i, steps_per_epoch, epochs));
  return out;
}

TEST(Schedule, WarmupThenCosine) {
  ScheduleOptions s = make_schedule("cosine");
  s.curve.as<CosineKeys>().final_lr_ratio = 0.1;
  s.warmup_epochs = 2;  // 4 steps of 2 per epoch; 14 steps in all
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 1.0, 0, 2, 7), 0.25);
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 1.0, 3, 2, 7), 1.0);
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 1.0, 4, 2, 7), 1.0);
  EXPECT_NEAR(scheduled_lr(s, 1.0, 9, 2, 7), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 5.0 / 9.0)), 1e-12);
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 1.0, 13, 2, 7), 0.1);
  const auto c = curve(s, 1.0, 2, 7);
  for (size_t i = 5; i < c.size(); ++i) EXPECT_LT(c[i], c[i - 1]) << "step " << i;
  s.curve = make_schedule("constant").curve;
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 0.5, 1, 2, 7), 0.25);
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 0.5, 10, 2, 7), 0.5);
}

TEST(Schedule, StepDropsByGammaAtEachMilestoneAfterTheWarmup) {
  ScheduleOptions s = make_schedule("step");
  s.warmup_epochs = 1;
  s.curve.as<StepKeys>().milestones = {2, 5};
  s.curve.as<StepKeys>().gamma = 0.1;
  const int64_t per_epoch = 4;
  const auto c = curve(s, 2.0, per_epoch, 7);
  EXPECT_DOUBLE_EQ(c[0], 0.5);  // warm-up: 2.0 * 1/4
  EXPECT_DOUBLE_EQ(c[3], 2.0);
  int drops = 0;
  for (size_t i = 1; i < c.size(); ++i) {
    if (i < static_cast<size_t>(per_epoch)) continue;  // warming up
    if (c[i] == c[i - 1]) continue;
    ++drops;
    EXPECT_TRUE(i == 2 * per_epoch || i == 5 * per_epoch) << "dropped at step " << i;
    EXPECT_NEAR(c[i], 0.1 * c[i - 1], 1e-15);
  }
  EXPECT_EQ(drops, 2);
  EXPECT_NEAR(c.back(), 0.02, 1e-15);
}

TEST(Schedule, OneCycleRisesToTheLrAtPctStartThenAnnealsToItsFloor) {
  ScheduleOptions s = make_schedule("one_cycle");
  auto& k = s.curve.as<OneCycleKeys>();
  k.pct_start = 0.25;
  k.div_factor = 20;
  k.final_div_factor = 50;
  const auto c = curve(s, 1.0, 10, 4);  // 40 steps; the peak is step 0.25 * 40 - 1 = 9
  EXPECT_NEAR(c.front(), 1.0 / 20, 1e-15);
  EXPECT_NEAR(c[9], 1.0, 1e-15);
  EXPECT_NEAR(c.back(), 1.0 / 20 / 50, 1e-15);
  for (size_t i = 1; i <= 9; ++i) EXPECT_GT(c[i], c[i - 1]) << "step " << i;
  for (size_t i = 10; i < c.size(); ++i) EXPECT_LT(c[i], c[i - 1]) << "step " << i;
  EXPECT_NEAR(scheduled_lr(s, 1.0, 45, 10, 4), c.back(), 1e-15) << "past the end: stays at the floor";
  k.pct_start = 0.01;  // 0.4 steps to warm up in
  EXPECT_THROW(scheduled_lr(s, 1.0, 0, 10, 4), Error);
}

TEST(Schedule, ApplicationsRegisterTheirOwn) {
  if (!schedule_registry().contains("test_halving")) {
    schedule_registry().add("test_halving", {options_of<NoOptions>(), [](const TypeOptions&, double lr, int64_t step,
                                                                          const ScheduleSpan& span) {
                              return lr * std::pow(0.5, static_cast<double>(step / span.steps_per_epoch));
                            }});
  }
  ScheduleOptions s = make_schedule("test_halving");
  s.warmup_epochs = 1;
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 1.0, 0, 4, 3), 0.25);  // the warm-up applies
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 1.0, 9, 4, 3), 0.25);
  EXPECT_THROW(schedule_registry().add("cosine", {}), Error);
  EXPECT_CONTAINS(stoker::testing::error_of([&] { make_schedule("nonesuch"); }),
                  "unknown schedule type 'nonesuch'; known: constant, cosine, one_cycle, step");
}

// Each registered type says what its curve does (the run's "schedule:" line asks for it), after the
// linear warm-up where one applies; a type that says nothing is named.
TEST(Schedule, EachTypeDescribesItself) {
  ScheduleOptions cosine = make_schedule("cosine");
  cosine.warmup_epochs = 0.5;
  EXPECT_EQ(describe_schedule(cosine), "0.5 warm-up epoch(s), then cosine down to 0 x lr");
  ScheduleOptions step = make_schedule("step");
  step.curve.as<StepKeys>().milestones = {3, 6};
  EXPECT_EQ(describe_schedule(step), "step: lr x 0.1 at epoch(s) 3, 6");
  EXPECT_EQ(describe_schedule(make_schedule("one_cycle")),
            "one_cycle: lr / 25 up to lr over 0.3 of the steps, then down to lr / 250000");
  ScheduleOptions constant = make_schedule("constant");
  constant.warmup_epochs = 1;
  EXPECT_EQ(describe_schedule(constant), "1 warm-up epoch(s), then constant");
  // Checks against the run's length come from the type too.
  const ScheduleType type = schedule_registry().get("step");
  EXPECT_CONTAINS(stoker::testing::error_of([&] { type.check_run(step.curve.options(), 0, 6); }),
                  "schedule.milestones[1] (6) must be within the run: at least schedule.warmup_epochs (0) and "
                  "below train.epochs (6)");
}

// ---- against PyTorch (tests/golden/schedule_golden.h) ----------------------------------------

ScheduleOptions options_of(const golden::ScheduleGolden& c) {
  ScheduleOptions s = make_schedule(c.type);
  s.warmup_epochs = c.warmup_epochs;
  if (c.type == "cosine") s.curve.as<CosineKeys>().final_lr_ratio = c.final_lr_ratio;
  if (c.type == "step") {
    s.curve.as<StepKeys>().milestones = c.milestones;
    s.curve.as<StepKeys>().gamma = c.gamma;
  }
  if (c.type == "one_cycle") {
    auto& k = s.curve.as<OneCycleKeys>();
    k.pct_start = c.pct_start;
    k.div_factor = c.div_factor;
    k.final_div_factor = c.final_div_factor;
  }
  return s;
}

TEST(Schedule, EveryCurveEqualsTorchsSchedulers) {
  std::set<std::string> types;
  for (const golden::ScheduleGolden& c : golden::schedule_goldens()) {
    SCOPED_TRACE(c.name);
    const ScheduleOptions s = options_of(c);
    types.insert(s.curve.type());
    ASSERT_EQ(static_cast<int64_t>(c.lrs.size()), c.steps_per_epoch * c.epochs);
    double worst = 0;
    for (size_t i = 0; i < c.lrs.size(); ++i) {
      const double ours = scheduled_lr(s, c.lr, static_cast<int64_t>(i), c.steps_per_epoch, c.epochs);
      const double theirs = c.lrs[i];
      // Relative to the larger value; a curve that ends at exactly 0 is compared to lr * 1e-6
      // there (torch's chained cosine reaches 0 only up to rounding).
      const double error = std::abs(ours - theirs) / std::max({std::abs(ours), std::abs(theirs), c.lr * 1e-6});
      worst = std::max(worst, error);
      EXPECT_LE(error, 1e-9) << "step " << i << ": ours " << ours << ", torch " << theirs;
    }
    ::testing::Test::RecordProperty(c.name + "_max_relative_error", fmt::format("{:.3g}", worst));
  }
  EXPECT_EQ(types, (std::set<std::string>{"constant", "cosine", "step", "one_cycle"}));
  EXPECT_GE(golden::schedule_goldens().size(), 8u);
}

}  // namespace
}  // namespace stoker
