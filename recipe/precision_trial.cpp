#include "recipe/precision_trial.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include "common/error.h"
#include "common/hardware.h"
#include "data/cache.h"
#include "recipe/parts.h"
#include "trainer/callbacks.h"
#include "trainer/keep_rng.h"

namespace stoker {
namespace {

constexpr const char* kPhase = "the precision trial (train.precision)";

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Puts the process-wide TF32 settings back as they were when it goes away.
class KeepTf32 {
 public:
  KeepTf32() : cublas_(at::globalContext().allowTF32CuBLAS()), cudnn_(at::globalContext().allowTF32CuDNN()) {}
  ~KeepTf32() {
    at::globalContext().setAllowTF32CuBLAS(cublas_);
    at::globalContext().setAllowTF32CuDNN(cudnn_);
  }
  KeepTf32(const KeepTf32&) = delete;
  KeepTf32& operator=(const KeepTf32&) = delete;

 private:
  bool cublas_, cudnn_;
};

// One candidate: a Trainer of the recipe's model, optimizer and loss in its precision (eager, no EMA).
class Subject {
 public:
  Subject(const RunPlan& plan, Precision precision) : precision_(precision), device_(plan.device) {
    RunPlan p = plan;
    p.config.train.precision = precision;
    p.config.train.cuda_graph = false;
    p.config.train.ema_decay = 0;
    p.steps_per_epoch = 1000;
    const data::InputShape& in = plan.input;
    auto source = std::make_shared<data::CachedBatchSource>(std::vector<data::Batch>{batch(plan, 1)}, 1, in.channels,
                                                            in.height, in.width);
    trainer_ = std::make_unique<Trainer>(trainer_options(p), make_parts(p, make_model(p.config, in)), source,
                                         source);
    trainer_->module().train();
    plan_ = p;
  }
  Precision precision() const { return precision_; }
  double input_bytes_per_sample() const {
    const data::InputShape& in = plan_.input;
    return 4.0 * static_cast<double>(in.channels * in.height * in.width);
  }

  // Milliseconds of one training step at `size` samples, the device synchronised after it.
  double step(int64_t size) {
    if (!batch_.input.defined() || batch_.input.size(0) != size) batch_ = batch(plan_, size);
    apply_global_precision(precision_);  // TF32 as a run in this precision has it
    const auto start = Clock::now();
    trainer_->train_step(batch_);
    if (device_.is_cuda()) torch::cuda::synchronize(device_.index());
    return 1e3 * seconds_since(start);
  }

 private:
  // A synthetic batch of `size` samples of the plan's shape on its device, in the candidate's input dtype.
  data::Batch batch(const RunPlan& plan, int64_t size) const {
    const data::InputShape& in = plan.input;
    data::Batch b;
    b.input = torch::randn({size, in.channels, in.height, in.width}).to(plan.device);
    if (is_mixed(precision_) || precision_ == Precision::kBf16True) {
      b.input = b.input.to(is_mixed(precision_) ? autocast_dtype(precision_) : parameter_dtype(precision_));
    }
    if (plan.config.train.channels_last) b.input = b.input.contiguous(torch::MemoryFormat::ChannelsLast);
    b.target = torch::randint(plan.config.data.num_classes, {size}, torch::kLong).to(plan.device);
    return b;
  }

  Precision precision_;
  torch::Device device_;
  RunPlan plan_;
  std::unique_ptr<Trainer> trainer_;
  data::Batch batch_;
};

// One measured step at `size`, its time and peak memory measured (after an unmeasured one at a new size).
TrialEstimate measured_step(ShapeWarmStep& s, int64_t size, double floor_bytes_per_sample, torch::Device device) {
  if (!s.warm(size)) s.untimed(size);  // cuDNN's algorithm search: not timed, and not in the peak
  reset_peak_memory(device);
  const double before = memory_in_use_bytes(device);
  const double ms = s.timed(size);
  check_stop_requested(kPhase);
  TrialEstimate e;
  e.probe = size;
  e.ms_per_sample = ms / static_cast<double>(size);
  // The resident set grows only by what the allocator had to map anew: a small step may show nothing.
  // A step holds at least its input batch (a floor, in float32).
  e.bytes_per_sample = std::max(std::max(0.0, peak_memory_bytes(device) - before) / static_cast<double>(size),
                                floor_bytes_per_sample);
  return e;
}

// The run's batch on one rank, capped by the samples a rank has.
int64_t run_batch(const RunPlan& plan) {
  const int64_t per_rank = std::max<int64_t>(1, plan.train_samples / std::max<int64_t>(1, plan.batches.shards));
  return std::min(plan.config.data.batch_size, per_rank);
}

std::string gigabytes(double bytes) { return fmt::format("{:.1f} GB", bytes / 1e9); }

// The batch to time: the run's, halved while a step would take over max_step_s or need over the
// memory bound (never below the probe's); `why` says what capped it.
int64_t trial_batch(int64_t batch, const TrialEstimate& e, double memory_bound, const TrialBounds& b, std::string& why) {
  int64_t size = batch;
  while (size > e.probe && (e.ms(size) > 1e3 * b.max_step_s || e.bytes(size) > memory_bound)) size /= 2;
  size = std::max(size, e.probe);
  if (size == batch) return size;
  why = e.bytes(batch) > memory_bound
            ? fmt::format("a step at batch {} would need about {} beyond what is in use, over {:.0f}% of the {} "
                          "available",
                          batch, gigabytes(e.bytes(batch)), 100 * b.memory_share, gigabytes(memory_bound / b.memory_share))
            : fmt::format("a step at batch {} would take about {:.1f} s", batch, e.ms(batch) / 1e3);
  return size;
}

std::string times_text(const TrialTimes& t) {
  return fmt::format("{} {:.1f} ms [{:.1f}-{:.1f}]", precision_name(t.precision), t.median(), t.min(), t.max());
}

// The trial's outcome, measured: every candidate timed, or nothing (`skipped` says why).
struct Measured {
  std::vector<TrialTimes> times;
  int64_t batch = 0;
  std::string capped;   // why the batch is smaller than the run's
  std::string skipped;  // why nothing was timed
};

Measured measure(const RunPlan& plan, const std::vector<Precision>& candidates, const TrialBounds& b) {
  const torch::Device device = plan.device;
  const int64_t batch = run_batch(plan);
  const auto start = Clock::now();
  const double available = available_memory_bytes(device);
  const double memory_bound = available > 0 ? b.memory_share * available : INFINITY;
  std::vector<std::unique_ptr<Subject>> subjects;
  std::vector<ShapeWarmStep> steps;
  TrialEstimate worst;
  for (Precision p : candidates) {
    subjects.push_back(std::make_unique<Subject>(plan, p));
    Subject* s = subjects.back().get();
    steps.emplace_back([s](int64_t size) { return s->step(size); });
    const TrialEstimate e =
        probe_trial_batches(steps.back(), batch, memory_bound, s->input_bytes_per_sample(), b, device);
    worst.probe = worst.probe == 0 ? e.probe : std::min(worst.probe, e.probe);
    worst.ms_per_sample = std::max(worst.ms_per_sample, e.ms_per_sample);
    worst.bytes_per_sample = std::max(worst.bytes_per_sample, e.bytes_per_sample);
  }
  Measured m;
  m.batch = trial_batch(batch, worst, memory_bound, b, m.capped);
  const double run_s = worst.ms(batch) / 1e3 * static_cast<double>(plan.batches_per_epoch * plan.config.train.epochs);
  const double budget = std::clamp(b.max_share * run_s, b.min_budget_s, b.max_budget_s);
  const double n = static_cast<double>(candidates.size());
  const double needed = seconds_since(start) + (static_cast<double>(b.warmup) + 2) * n * worst.ms(m.batch) / 1e3;
  if (needed > budget) {
    m.skipped = fmt::format("timing a few steps at batch {} would bring the trial to about {:.1f} s, over its budget "
                            "of {:.1f} s ({:.0f}% of a run estimated at {:.0f} s; the probes measured up to batch {}, "
                            "{:.1f} ms a step there)",
                            m.batch, needed, budget, 100 * b.max_share, run_s, worst.probe, worst.ms(worst.probe));
    return m;
  }
  for (size_t i = 0; i < subjects.size(); ++i) {
    if (!steps[i].warm(m.batch)) {  // else a probe step was at this size: warm already
      for (int64_t k = 0; k < std::max<int64_t>(1, b.warmup); ++k) steps[i].untimed(m.batch);
    }
    check_stop_requested(kPhase);
    m.times.push_back(TrialTimes{subjects[i]->precision(), {}});
  }
  for (int64_t round = 0; round < b.rounds; ++round) {
    for (size_t i = 0; i < subjects.size(); ++i) {
      m.times[i].ms.push_back(steps[i].timed(m.batch));
      check_stop_requested(kPhase);
    }
    if (round >= 1 && seconds_since(start) + n * m.times[0].max() / 1e3 > budget) break;
  }
  return m;
}

}  // namespace

double ShapeWarmStep::timed(int64_t size) {
  if (!warm(size)) untimed(size);
  return step_(size);
}

void ShapeWarmStep::untimed(int64_t size) {
  step_(size);
  sizes_.insert(size);
}

TrialEstimate probe_trial_batches(ShapeWarmStep& step, int64_t batch, double memory_bound,
                                  double floor_bytes_per_sample, const TrialBounds& b, torch::Device device) {
  int64_t size = std::min<int64_t>(batch, 2);
  TrialEstimate e = measured_step(step, size, floor_bytes_per_sample, device);
  while (size < batch) {
    const int64_t next = std::min(batch, size * 4);
    if (e.ms(next) > 1e3 * b.max_step_s || e.bytes(next) > memory_bound) break;
    size = next;
    e = measured_step(step, size, floor_bytes_per_sample, device);
  }
  return e;
}

double TrialTimes::median() const {
  if (ms.empty()) return 0;
  std::vector<double> v = ms;
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 == 1 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}
double TrialTimes::min() const { return ms.empty() ? 0 : *std::min_element(ms.begin(), ms.end()); }
double TrialTimes::max() const { return ms.empty() ? 0 : *std::max_element(ms.begin(), ms.end()); }

TrialVerdict judge_trial(const std::vector<TrialTimes>& times) {
  TrialVerdict v;
  if (times.empty()) return v;
  size_t fastest = 0;
  for (size_t i = 1; i < times.size(); ++i) {
    if (times[i].median() < times[fastest].median()) fastest = i;
  }
  double slowest_median = 0;
  bool separated = true;
  for (size_t i = 0; i < times.size(); ++i) {
    if (i == fastest) continue;
    slowest_median = std::max(slowest_median, times[i].median());
    // Apart: the faster one's slowest step beats the other's fastest, and by more than 3% in the medians.
    separated = separated && times[fastest].max() < times[i].min() && times[i].median() > 1.03 * times[fastest].median();
  }
  v.tie = !separated;
  v.chosen = v.tie ? times.front().precision : times[fastest].precision;
  v.speedup = slowest_median / std::max(1e-9, times[fastest].median());
  return v;
}

namespace {

std::string measured_text(const Measured& m, const TrialVerdict& v) {
  std::vector<std::string> parts;
  for (const TrialTimes& t : m.times) parts.push_back(times_text(t));
  std::string text = fmt::format("a training step at batch {}{}: {}, medians [ranges] of {} interleaved steps", m.batch,
                                 m.capped.empty() ? "" : fmt::format(" ({})", m.capped), fmt::join(parts, ", "),
                                 m.times.front().ms.size());
  if (v.tie) {
    text += fmt::format("; a tie (the ranges overlap or the medians differ by under 3%): {} kept, the first candidate",
                        precision_name(v.chosen));
  } else {
    text += fmt::format("; {:.2f}x faster", v.speedup);
  }
  return text;
}

// An explicit precision that does not run natively here, timed against float32: a warning naming the
// faster choice when it is more than twice as slow (slow_precision_warning).
PrecisionDecision check_explicit(const RunPlan& plan, const HardwareFeatures& hw, const TrialBounds& bounds) {
  PrecisionDecision d;
  d.precision = plan.config.train.precision;
  logger().info("train.precision: {} has no fast path on {}: timing it against fp32 for a few steps",
                precision_name(d.precision), hw.name);
  const Measured m = measure(plan, {d.precision, Precision::kFp32}, bounds);
  if (!m.skipped.empty() || m.times.size() < 2) return d;
  const std::optional<std::string> warning = slow_precision_warning(m.times[0], m.times[1], hw);
  d.warning = warning.has_value();
  d.line = warning.value_or("");
  return d;
}

}  // namespace

std::optional<std::string> slow_precision_warning(const TrialTimes& requested, const TrialTimes& fp32,
                                                  const HardwareFeatures& hw) {
  const double asked = requested.median(), base = fp32.median();
  if (requested.precision == Precision::kFp32 || base <= 0 || asked <= 2.0 * base) return std::nullopt;
  return fmt::format("train.precision: {} takes {:.1f} ms per training step here, {:.1f}x float32's {:.1f} ms ({}); "
                     "--set train.precision=fp32 (or auto) would train about {:.1f}x faster",
                     precision_name(requested.precision), asked, asked / base, base, hw.summary(), asked / base);
}

PrecisionDecision decide_precision(const RunPlan& plan, const TrialBounds& bounds) {
  return decide_precision(plan, bounds, detect_hardware(plan.device));
}

PrecisionDecision decide_precision(const RunPlan& plan, const TrialBounds& bounds, const HardwareFeatures& hw) {
  const KeepRng keep_rng(plan.device);
  const KeepTf32 keep_tf32;
  const bool timeable = plan.input.fixed();
  PrecisionDecision d;
  d.precision = plan.config.train.precision;
  if (d.precision != Precision::kAuto) {
    if (runs_natively(d.precision, hw) || !timeable) return d;
    return check_explicit(plan, hw, bounds);
  }
  const PrecisionPlan candidates = plan_auto_precision(hw);
  d.precision = candidates.candidates.front();
  std::string how = "not timed: " + candidates.reason;
  if (candidates.candidates.size() > 1 && !timeable) how += "; the training batches vary in shape, so no step is timed";
  if (candidates.candidates.size() > 1 && timeable) {
    std::vector<std::string> names;
    for (Precision p : candidates.candidates) names.push_back(precision_name(p));
    logger().info("train.precision: auto: timing {} on training steps of the recipe's model at batch {} of {}x{}x{} "
                  "(probe steps at growing batches first; at most {:.0f}% of the run, {:.0f} s at most)",
                  fmt::join(names, " against "), run_batch(plan), plan.input.channels, plan.input.height,
                  plan.input.width, 100 * bounds.max_share, bounds.max_budget_s);
    const Measured m = measure(plan, candidates.candidates, bounds);
    if (!m.skipped.empty()) {
      how = fmt::format("not timed: {}; the hardware's first candidate: {}", m.skipped, candidates.reason);
    } else {
      const TrialVerdict v = judge_trial(m.times);
      d.precision = v.chosen;
      how = measured_text(m, v);
    }
  }
  d.line = fmt::format("train.precision: auto -> {} ({}) on {}", precision_name(d.precision), how, hw.summary());
  return d;
}

double median_step_ms(const RunPlan& plan, Precision precision, bool channels_last, int64_t warmup, int64_t steps) {
  const KeepRng keep_rng(plan.device);
  const KeepTf32 keep_tf32;
  RunPlan p = plan;
  p.config.train.channels_last = channels_last;
  Subject subject(p, precision);
  const int64_t batch = run_batch(p);
  for (int64_t i = 0; i < warmup; ++i) subject.step(batch);
  TrialTimes t{precision, {}};
  for (int64_t i = 0; i < steps; ++i) {
    check_stop_requested("timing the step variants");
    t.ms.push_back(subject.step(batch));
  }
  return t.median();
}

}  // namespace stoker
