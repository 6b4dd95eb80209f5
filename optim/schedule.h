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

#include <string>
#include <vector>

#include "common/options.h"
#include "common/registry.h"

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

// A schedule.type: its learning rate at `step` (0-based, past the warm-up unless own_warmup), and
// what the run asks of it beyond that: a line for the log, checks against the run's length.
// In each function `own` is the type's options struct (made by `options`).
struct ScheduleType {
  OptionsMaker options = options_of<NoOptions>();  // the type's own keys
  std::function<double(const TypeOptions& own, double base_lr, int64_t step, const ScheduleSpan&)> lr;
  bool own_warmup = false;  // the linear warm-up does not apply; schedule.warmup_epochs must be 0
  // The curve in words for the run's log, after the warm-up ("cosine down to 0.1 x lr"); the
  // type's name when not given.
  std::function<std::string(const TypeOptions& own)> describe = nullptr;
  // Checks of the type's keys against the run (schedule.warmup_epochs, train.epochs), at load time;
  // throws stoker::Error naming the keys as the config spells them (schedule.milestones[1]).
  std::function<void(const TypeOptions& own, double warmup_epochs, int64_t epochs)> check_run = nullptr;
  // own_warmup: the key that sets the type's own warm-up, named when schedule.warmup_epochs is
  // given anyway (one_cycle: pct_start).
  std::string warmup_key = "";
};

// The schedule types by name: constant, cosine, step, one_cycle; applications may add their own,
// with their own keys: schedule_registry().add("name", {options_of<MyKeys>(), lr_function}).
Registry<ScheduleType>& schedule_registry();

// One line on a schedule for the run's log: its warm-up and its type's description
// ("0.6 warm-up epoch(s), then cosine down to 0 x lr").
std::string describe_schedule(const ScheduleOptions& schedule);

// The learning rate for optimizer step `step` (0-based) of a run of `epochs` epochs of
// `steps_per_epoch` optimizer steps each, reaching `base_lr` after the warm-up.
double scheduled_lr(const ScheduleOptions& schedule, double base_lr, int64_t step,
                    int64_t steps_per_epoch, int64_t epochs);


}  // namespace stoker
