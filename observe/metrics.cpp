#include "observe/metrics.h"

#include <cmath>

#include <fmt/format.h>

#include "common/error.h"
#include "common/log.h"

namespace stoker {

// ---- scalars: the names TensorBoard and MLflow show ------------------------------------------------

std::vector<Scalar> telemetry_scalars(const std::optional<GpuSample>& s) {
  if (!s) return {};
  std::vector<Scalar> out;
  for (const Scalar& field : {Scalar{"gpu/utilization", s->utilization}, Scalar{"gpu/memory_used_gib", s->memory_used_gib},
                              Scalar{"gpu/power_w", s->power_w}, Scalar{"gpu/temperature_c", s->temperature_c},
                              Scalar{"gpu/sm_clock_mhz", s->sm_clock_mhz}}) {
    if (!std::isnan(field.value)) out.push_back(field);  // NaN: a field this GPU does not report
  }
  return out;
}

std::vector<Scalar> scalars_of(const StepRecord& r) {
  std::vector<Scalar> out = {{"train/loss", r.loss},
                             {"train/lr", r.lr},
                             {"train/samples_per_s", r.samples_per_s},
                             {"train/data_wait", r.data_wait}};
  if (r.loss_scale) out.push_back({"train/loss_scale", *r.loss_scale});
  if (r.skipped_steps) out.push_back({"train/skipped_steps", static_cast<double>(*r.skipped_steps)});
  if (r.tflops) out.push_back({"perf/tflops", *r.tflops});
  if (r.mfu) out.push_back({"perf/mfu", *r.mfu});
  for (Scalar& s : telemetry_scalars(r.telemetry)) out.push_back(std::move(s));
  if (r.gpu_idle) out.push_back({"train/gpu_idle", *r.gpu_idle});
  return out;
}

std::vector<Scalar> scalars_of(const EpochRecord& e) {
  const EpochResult& r = e.result;
  std::vector<Scalar> out = {
      {"train/epoch_loss", r.train_loss},
      {"train/epoch_top1", r.train_top1},
      {"epoch/epoch", static_cast<double>(r.epoch + 1)},
      {"epoch/seconds", r.seconds},
      {"epoch/samples_per_s", r.samples_per_s},
      {"epoch/data_wait", r.data_wait},
      {"data/read_s", r.stages.read},
      {"data/decode_s", r.stages.decode},
      {"data/transform_s", r.stages.transform},
      {"data/copy_s", r.stages.copy},
      {"data/bad_samples", static_cast<double>(r.stages.bad_samples)},
  };
  const auto add_eval = [&](const char* prefix, const EvalResult& x) {
    if (x.samples == 0) return;
    out.push_back({fmt::format("{}/loss", prefix), x.loss});
    out.push_back({fmt::format("{}/top1", prefix), x.top1});
    out.push_back({fmt::format("{}/top5", prefix), x.top5});
  };
  add_eval("test", r.test);
  add_eval("ema_test", r.ema_test);
  if (e.tflops) out.push_back({"epoch/tflops", *e.tflops});
  if (e.mfu) out.push_back({"epoch/mfu", *e.mfu});
  return out;
}

// ---- the logger --------------------------------------------------------------------------------------

MetricsLogger::MetricsLogger(MetricsOptions options) : options_(std::move(options)) {
  STOKER_CHECK(options_.log_every_steps > 0, "metrics: log_every_steps must be positive, got {}",
               options_.log_every_steps);
}

void MetricsLogger::add_sink(std::shared_ptr<MetricsSink> sink) { sinks_.push_back(std::move(sink)); }

bool MetricsLogger::due(const StepInfo& s) const {
  return s.optimizer_step && (s.step % options_.log_every_steps == 0 || s.batch + 1 == s.batches);
}

void MetricsLogger::reset_window() {
  window_seconds_ = window_data_seconds_ = 0;
  window_samples_ = 0;
}

void MetricsLogger::add_efficiency(double samples_per_s, std::optional<double>& tflops,
                                   std::optional<double>& mfu) const {
  if (options_.train_flops_per_sample <= 0) return;
  const double flops = samples_per_s * options_.train_flops_per_sample;
  tflops = flops / 1e12;
  if (options_.peak_flops > 0) mfu = flops / options_.peak_flops;
}

StepRecord MetricsLogger::record(const StepInfo& s, int64_t epochs, int64_t total_steps) const {
  StepRecord r;
  r.epoch = s.epoch;
  r.epochs = epochs;
  r.batch = s.batch + 1;
  r.batches = s.batches;
  r.step = s.step;
  r.loss = s.loss.item<double>();  // synchronises with the device: only when a record is made
  r.lr = s.lr;
  r.samples_per_s = window_seconds_ > 0 ? static_cast<double>(window_samples_) / window_seconds_ : 0;
  r.data_wait = window_seconds_ > 0 ? window_data_seconds_ / window_seconds_ : 0;
  r.eta_s = static_cast<double>(total_steps - s.step) * mean_step_seconds_;
  add_efficiency(r.samples_per_s, r.tflops, r.mfu);
  return r;
}

void MetricsLogger::start(int64_t step) {
  reset_window();
  for (const auto& sink : sinks_) sink->start(step);
}

bool MetricsLogger::log_step(const StepInfo& s, int64_t epochs, int64_t total_steps, const StepReadings& readings) {
  if (s.batch == 0) reset_window();  // an epoch's rates start with the epoch
  window_seconds_ += s.step_seconds;
  window_data_seconds_ += s.data_seconds;
  window_samples_ += s.samples;
  mean_step_seconds_ =
      mean_step_seconds_ == 0 ? s.step_seconds : 0.98 * mean_step_seconds_ + 0.02 * s.step_seconds;
  if (!due(s)) {
    bool wanted = false;
    for (const auto& sink : sinks_) wanted = wanted || sink->wants_progress(s.batch + 1, s.batches);
    if (!wanted) return false;
    const StepRecord r = record(s, epochs, total_steps);
    for (const auto& sink : sinks_) sink->progress(r);
    return false;
  }
  StepRecord r = record(s, epochs, total_steps);
  r.gpu_idle = readings.gpu_idle;
  r.loss_scale = readings.loss_scale;
  r.skipped_steps = readings.skipped_steps;
  if (options_.telemetry) r.telemetry = options_.telemetry();
  for (const auto& sink : sinks_) sink->step(r);
  check_starved(r);
  reset_window();
  return true;
}

void MetricsLogger::log_epoch(const EpochResult& result, int64_t epochs, int64_t step, bool loss_scaling) {
  EpochRecord e;
  e.result = result;
  e.epochs = epochs;
  e.step = step;
  e.loss_scaling = loss_scaling;
  add_efficiency(result.samples_per_s, e.tflops, e.mfu);
  for (const auto& sink : sinks_) sink->epoch(e);
}

void MetricsLogger::end(const FitResult& result) {
  for (const auto& sink : sinks_) sink->end(result);
}

// The sawtooth: the GPU idle more than 5% of the time, three logged windows in a row, while the
// step waited for data. Said once per run.
void MetricsLogger::check_starved(const StepRecord& r) {
  constexpr double kIdle = 0.05;
  const double idle = r.gpu_idle.value_or(0.0);
  starved_windows_ = idle > kIdle && r.data_wait > kIdle ? starved_windows_ + 1 : 0;
  if (starved_windows_ < 3 || warned_starved_) return;
  warned_starved_ = true;
  logger().warn("the GPU sat idle {:.1f}% of the time between steps while the step waited for data {:.1f}% of it: "
                "the input pipeline is starving it; `trainer doctor --config <recipe>` finds where and what to raise",
                100.0 * idle, 100.0 * r.data_wait);
}

// ---- as a Trainer callback ---------------------------------------------------------------------------

void MetricsLogger::on_fit_start(Trainer& trainer) { start(trainer.state().step); }

void MetricsLogger::on_epoch_start(Trainer&, int64_t epoch) {
  if (options_.flops_at_epoch && options_.train_flops_per_sample > 0) {
    options_.train_flops_per_sample = options_.flops_at_epoch(epoch);
  }
  reset_window();
}

void MetricsLogger::on_train_step_end(Trainer& trainer, const StepInfo& s) {
  StepReadings readings;
  if (due(s)) {
    // Both read the device (CUDA events, the scale): only at a logging step.
    readings.gpu_idle = trainer.take_gpu_idle();
    if (trainer.scaler().enabled()) {
      readings.loss_scale = trainer.scaler().scale_value();
      readings.skipped_steps = trainer.scaler().skipped_steps();
    }
  }
  log_step(s, trainer.options().epochs, trainer.total_steps(), readings);
}

void MetricsLogger::on_epoch_end(Trainer& trainer, const EpochResult& result) {
  log_epoch(result, trainer.options().epochs, trainer.state().step, trainer.scaler().enabled());
}

void MetricsLogger::on_fit_end(Trainer&, const FitResult& result) { end(result); }

}  // namespace stoker
