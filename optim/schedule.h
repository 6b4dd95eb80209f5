// Learning-rate schedules: the learning rate at each optimizer step, as a pure function of the
// schedule options, the base learning rate and the step, so that the loop, the progress display and
// the tests all agree on it. Also the linear scaling of the learning rate with the global batch size
// (optimizer.lr_reference_batch).
//
//   schedule.type   after a linear warm-up of schedule.warmup_epochs
//   constant        lr
//   cosine          cosine from lr down to lr * final_lr_ratio at the last step
//   step            lr * gamma^(milestones passed); milestones are epochs
//   one_cycle       PyTorch's OneCycleLR (cosine annealing, no momentum cycling): from
//                   lr / div_factor up to lr over pct_start of the run, then down to
//                   lr / div_factor / final_div_factor; it has its own warm-up
//
// Each type is an entry of schedule_registry(); applications may register more. Schedules count
// optimizer steps. tests/golden/schedule_golden.py computes the same curves with
// torch.optim.lr_scheduler; tests/optim/schedule_test.cpp compares them.
#pragma once

#include <cstdint>
#include <functional>

#include "common/options.h"
#include "common/registry.h"
#include <string>
#include <vector>

namespace stoker {

// cosine's own key.
struct CosineKeys : TypeOptionsOf<CosineKeys> {
  double final_lr_ratio = 0.0;  // ends at lr * final_lr_ratio
  void visit(OptionsVisitor& v) override;
};
// step's own keys: at each milestone (an epoch) the learning rate is multiplied by gamma.
struct StepKeys : TypeOptionsOf<StepKeys> {
  std::vector<int64_t> milestones;
  double gamma = 0.1;
  void visit(OptionsVisitor& v) override;
  void check() const override;  // at least one milestone, increasing
};
// one_cycle's own keys (torch.optim.lr_scheduler.OneCycleLR's).
struct OneCycleKeys : TypeOptionsOf<OneCycleKeys> {
  double pct_start = 0.3;         // share of the steps spent rising to lr
  double div_factor = 25.0;       // starts at lr / div_factor
  double final_div_factor = 1e4;  // ends at lr / div_factor / final_div_factor
  void visit(OptionsVisitor& v) override;
};

struct ScheduleOptions {
  // schedule.type (constant | cosine | step | one_cycle, or registered) and its own keys beside it.
  TypedOptions curve{"cosine", std::make_unique<CosineKeys>()};
  double warmup_epochs = 0.0;  // linear warm-up before the curve (not for types with their own)
};

// A schedule of a registered type with its default keys, e.g. make_schedule("step").
ScheduleOptions make_schedule(const std::string& type);


// The steps a schedule spans, in optimizer steps.
struct ScheduleSpan {
  int64_t steps_per_epoch = 1;
  int64_t total = 1;   // steps_per_epoch * train.epochs
  int64_t warmup = 0;  // round(schedule.warmup_epochs * steps_per_epoch); 0 with own_warmup
};

// A schedule.type: its learning rate at `step` (0-based, past the warm-up unless own_warmup).
struct ScheduleType {
  OptionsMaker options = options_of<NoOptions>();  // the type's own keys
  // `own` is the type's options struct (made by `options`).
  std::function<double(const TypeOptions& own, double base_lr, int64_t step, const ScheduleSpan&)> lr;
  bool own_warmup = false;  // the linear warm-up does not apply; schedule.warmup_epochs must be 0
};

// The schedule types by name: constant, cosine, step, one_cycle; applications may add their own,
// with their own keys: schedule_registry().add("name", {options_of<MyKeys>(), lr_function}).
Registry<ScheduleType>& schedule_registry();

// The learning rate for optimizer step `step` (0-based) of a run of `epochs` epochs of
// `steps_per_epoch` optimizer steps each, reaching `base_lr` after the warm-up.
double scheduled_lr(const ScheduleOptions& schedule, double base_lr, int64_t step,
                    int64_t steps_per_epoch, int64_t epochs);


}  // namespace stoker
