#include "trainer/callbacks.h"

#include "common/trace.h"

#include <atomic>
#include <cmath>
#include <csignal>

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include "common/error.h"
#include "trainer/evaluate.h"

namespace stoker {

// ---- metrics and progress ---------------------------------------------------------------------------

MetricsCallback::MetricsCallback(const std::filesystem::path& metrics_file, bool live_progress,
                                 int64_t log_every_steps, MetricsOptions options)
    : writer_(metrics_file), options_(std::move(options)), live_(live_progress), every_(log_every_steps) {}

std::string MetricsCallback::add_efficiency(JsonLine& line, double samples_per_s) const {
  if (options_.train_flops_per_sample <= 0) return "";
  const double flops = samples_per_s * options_.train_flops_per_sample;
  line.add("tflops", flops / 1e12);
  if (options_.peak_flops <= 0) return fmt::format(", {:.3g} TFLOP/s", flops / 1e12);
  line.add("mfu", flops / options_.peak_flops);
  const double mfu = flops / options_.peak_flops;
  // Over 100% only when the peak was measured low (the CPU's peak is measured once, at the start,
  // and a busy machine then gives a low one): say so rather than print a number that means nothing.
  return fmt::format(", {:.3g} TFLOP/s, MFU {:.1f}%{}", flops / 1e12, 100.0 * mfu,
                     mfu > 1.0 ? " (over 100%: the peak measured at the start was low, the machine was busy then)" : "");
}

void MetricsCallback::reset_window() {
  window_seconds_ = window_data_seconds_ = window_loss_ = 0;
  window_samples_ = window_steps_ = 0;
}

void MetricsCallback::on_epoch_start(Trainer&, int64_t) {
  progress_ = std::make_unique<Progress>(live_, every_);
  reset_window();
}

void MetricsCallback::on_train_step_end(Trainer& trainer, const StepInfo& s) {
  window_seconds_ += s.step_seconds;
  window_data_seconds_ += s.data_seconds;
  window_samples_ += s.samples;
  ++window_steps_;
  mean_step_seconds_ = mean_step_seconds_ == 0 ? s.step_seconds
                                               : 0.98 * mean_step_seconds_ + 0.02 * s.step_seconds;
  const int64_t every = every_;
  const bool log_now = s.step % every == 0 || s.batch + 1 == s.batches;
  // Reading the loss synchronises with the device: only when it is shown or logged.
  if (!log_now && !progress_->due(s.batch + 1, s.batches)) return;
  const double loss = s.loss.item<double>();
  window_loss_ = loss;
  if (log_now) {
    if (const std::optional<double> idle = trainer.take_gpu_idle()) gpu_idle_ = *idle;
  }
  ProgressUpdate u;
  u.epoch = s.epoch + 1;
  u.epochs = trainer.options().epochs;
  u.step = s.batch + 1;
  u.steps = s.batches;
  u.loss = loss;
  u.lr = s.lr;
  u.samples_per_s = window_seconds_ > 0 ? window_samples_ / window_seconds_ : 0;
  u.data_wait = window_seconds_ > 0 ? window_data_seconds_ / window_seconds_ : 0;
  u.eta_s = static_cast<double>(trainer.total_steps() - s.step) * mean_step_seconds_;
  u.gpu_idle = gpu_idle_;
  progress_->update(u);
  if (!log_now) return;
  JsonLine line = JsonLine()
                      .add("kind", std::string("step"))
                      .add("epoch", s.epoch)
                      .add("step", s.step)
                      .add("loss", loss)
                      .add("lr", s.lr)
                      .add("samples_per_s", u.samples_per_s)
                      .add("data_wait", u.data_wait);
  if (gpu_idle_ >= 0) line.add("gpu_idle", gpu_idle_);
  add_efficiency(line, u.samples_per_s);
  if (options_.telemetry) add_telemetry(line, options_.telemetry(s.step));
  writer_.write(line);
  check_starved(u.data_wait);
  reset_window();
}

// The sawtooth: the GPU idle more than 5% of the time, three logged windows in a row, while the
// step waited for data. Said once per fit.
void MetricsCallback::check_starved(double data_wait) {
  constexpr double kIdle = 0.05;
  starved_windows_ = gpu_idle_ > kIdle && data_wait > kIdle ? starved_windows_ + 1 : 0;
  if (starved_windows_ < 3 || warned_starved_) return;
  warned_starved_ = true;
  logger().warn("the GPU sat idle {:.1f}% of the time between steps while the step waited for data {:.1f}% of it: "
                "the input pipeline is starving it; `trainer doctor --config <recipe>` finds where and what to raise",
                100.0 * gpu_idle_, 100.0 * data_wait);
}

void MetricsCallback::on_epoch_end(Trainer& trainer, const EpochResult& r) {
  if (progress_) progress_->finish_line();
  JsonLine line = JsonLine()
                      .add("kind", std::string("epoch"))
                      .add("epoch", r.epoch)
                      .add("step", trainer.state().step)
                      .add("train_loss", r.train_loss)
                      .add("test_loss", r.test.loss)
                      .add("test_top1", r.test.top1)
                      .add("test_top5", r.test.top5)
                      .add("test_samples", r.test.samples)
                      .add("test_excluded", r.test.excluded)
                      .add("epoch_seconds", r.seconds)
                      .add("samples_per_s", r.samples_per_s)
                      .add("data_wait", r.data_wait)
                      .add("data_read_s", r.stages.read)
                      .add("data_decode_s", r.stages.decode)
                      .add("data_transform_s", r.stages.transform)
                      .add("data_copy_s", r.stages.copy)
                      .add("bad_samples", r.stages.bad_samples)
                      .add("loss_scale", r.loss_scale)
                      .add("skipped_steps", r.skipped_steps)
                      .add("nonfinite_skips", r.nonfinite_skips);
  const std::string efficiency = add_efficiency(line, r.samples_per_s);
  if (r.ema_test.samples > 0) {
    line.add("ema_test_loss", r.ema_test.loss)
        .add("ema_test_top1", r.ema_test.top1)
        .add("ema_test_top5", r.ema_test.top5);
  }
  writer_.write(line);
  if (trainer.scaler().enabled()) {
    logger().info("epoch {}: loss scale {:g}, {} optimizer step(s) skipped so far for inf/NaN gradients",
                  r.epoch + 1, r.loss_scale, r.skipped_steps);
  }
  if (r.nonfinite_skips > 0) {
    logger().warn("epoch {}: {} optimizer step(s) skipped for an inf/NaN loss or gradients "
                  "(train.on_nonfinite: skip)",
                  r.epoch + 1, r.nonfinite_skips);
  }
  if (r.test.excluded > 0) {
    logger().warn("epoch {}: {} unreadable test sample(s) left out of the evaluation ({} evaluated; see the log "
                  "for their files)",
                  r.epoch + 1, r.test.excluded, r.test.samples);
  }
  if (r.stages.bad_samples > 0) {
    logger().warn("epoch {}: {} unreadable sample(s) skipped and replaced (see the log for their files)",
                  r.epoch + 1, r.stages.bad_samples);
  }
  const std::string ema =
      r.ema_test.samples > 0
          ? fmt::format(", EMA: test loss {:.4f}, top-1 {:.2f}%, top-5 {:.2f}%", r.ema_test.loss,
                        100.0 * r.ema_test.top1, 100.0 * r.ema_test.top5)
          : "";
  logger().info("epoch {}/{}: train loss {:.4f}, test loss {:.4f}, test top-1 {:.2f}%, top-5 {:.2f}%{}, "
                "{} ({:.0f} samples/s, data wait {:.1f}%{})",
                r.epoch + 1, trainer.options().epochs, r.train_loss, r.test.loss,
                100.0 * r.test.top1, 100.0 * r.test.top5, ema, format_duration(r.seconds),
                r.samples_per_s, 100.0 * r.data_wait, efficiency);
}

void MetricsCallback::on_fit_end(Trainer&, const FitResult&) {
  if (progress_) progress_->finish_line();
}

// ---- checkpoints ------------------------------------------------------------------------------------

CheckpointCallback::CheckpointCallback(const std::filesystem::path& folder, CheckpointOptions options)
    : folder_(folder), options_(std::move(options)) {
  std::filesystem::create_directories(folder_);
}

void CheckpointCallback::save(Trainer& trainer, const char* name) {
  const auto path = folder_ / name;
  trainer.save_checkpoint(path);
  last_saved_ = SavedCheckpoint{path, trainer.state().step};
  logger().debug("saved {} (epoch {}, batch {}, step {})", path.string(), trainer.state().epoch,
                 trainer.state().batch_in_epoch, trainer.state().step);
}

void CheckpointCallback::on_train_step_end(Trainer& trainer, const StepInfo& s) {
  const int64_t every = options_.every_steps;
  if (every > 0 && options_.save_last && s.optimizer_step && s.step % every == 0 &&
      s.batch + 1 < s.batches) {
    save(trainer, "last.pt");
  }
}

void CheckpointCallback::on_epoch_end(Trainer& trainer, const EpochResult& r) {
  const CheckpointOptions& options = options_;
  TrainState& state = trainer.state();
  const bool higher = higher_is_better(options.best_metric);
  const double value = epoch_metric(r, options.best_metric);
  const bool improved = !std::isnan(value) &&
                        (std::isnan(state.best_metric) ||
                         (higher ? value > state.best_metric : value < state.best_metric));
  if (improved) {
    state.best_metric = value;
    state.best_epoch = r.epoch;
  }
  // `last` first: it carries the updated best, so a resumed run knows it.
  if (options.save_last) save(trainer, "last.pt");
  if (improved && options.save_best) {
    save(trainer, "best.pt");
    logger().info("new best {} = {:.4f} at epoch {}: saved checkpoints/best.pt", options.best_metric,
                  value, r.epoch + 1);
  }
}

void CheckpointCallback::on_fit_end(Trainer& trainer, const FitResult& result) {
  if (result.interrupted && options_.save_last) {
    save(trainer, "last.pt");
    logger().warn("stopped at epoch {}, batch {} (step {}); saved {}",
                  trainer.state().epoch + 1, trainer.state().batch_in_epoch, trainer.state().step,
                  (folder_ / "last.pt").string());
  }
}

// ---- early stopping ---------------------------------------------------------------------------------

void EarlyStoppingCallback::on_validation_end(Trainer& trainer, const EpochResult& r) {
  const EarlyStoppingOptions& o = options_;
  if (o.patience <= 0) return;
  TrainState& state = trainer.state();
  const double value = epoch_metric(r, o.metric);
  STOKER_CHECK(!std::isnan(value), "train.early_stopping.metric {} has no value after epoch {}",
               o.metric, r.epoch + 1);
  const bool higher = higher_is_better(o.metric);
  const double best = state.early_stop_best;
  if (std::isnan(best) || (higher ? value > best + o.min_delta : value < best - o.min_delta)) {
    state.early_stop_best = value;
    state.early_stop_epoch = r.epoch;
    return;
  }
  const int64_t stale = r.epoch - state.early_stop_epoch;
  if (stale < o.patience || r.epoch + 1 >= trainer.options().epochs) return;
  reason_ = fmt::format("early stopping after epoch {}: {} has not improved by more than {:g} for {} "
                        "epoch(s) (best {:.4f} at epoch {}; train.early_stopping.patience is {})",
                        r.epoch + 1, o.metric, o.min_delta, stale, best, state.early_stop_epoch + 1,
                        o.patience);
  trainer.request_finish();
}

void EarlyStoppingCallback::on_epoch_end(Trainer&, const EpochResult&) {
  if (reason_.empty()) return;
  logger().info("{}", reason_);
  reason_.clear();
}

// ---- stopping on a signal ---------------------------------------------------------------------------

namespace {
std::atomic<bool> g_stop_signal{false};

extern "C" void on_stop_signal(int sig) {
  g_stop_signal.store(true);
  std::signal(sig, SIG_DFL);  // a second signal ends the process at once
}
}  // namespace

void install_stop_signal_handlers() {
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

bool stop_signal_received() { return g_stop_signal.load(); }

void StopOnSignalCallback::on_train_step_end(Trainer& trainer, const StepInfo&) {
  if (g_stop_signal.load()) trainer.request_stop();
}

// ---- TraceCallback ----------------------------------------------------------------------------------

void TraceCallback::on_fit_start(Trainer& trainer) {
  trace::name_thread("training");
  if (options_.steps > 0 && trainer.state().step == options_.start_step) {
    trace::start();
    recording_ = true;
  }
}

void TraceCallback::on_train_step_end(Trainer& /*trainer*/, const StepInfo& step) {
  if (options_.steps <= 0 || written_ || !step.optimizer_step) return;
  if (!recording_ && step.step == options_.start_step) {
    trace::start();
    recording_ = true;
  } else if (recording_ && step.step >= options_.start_step + options_.steps) {
    finish(step.step);
  }
}

void TraceCallback::on_fit_end(Trainer& trainer, const FitResult& /*result*/) {
  if (recording_ && !written_) finish(trainer.state().step);
}

void TraceCallback::finish(int64_t step) {
  trace::stop();
  recording_ = false;
  written_ = true;
  trace::write(path_);
  logger().info("train.trace: steps {} to {} written to {} ({} events; open it in ui.perfetto.dev)",
                options_.start_step + 1, step, path_.string(), trace::event_count());
}

}  // namespace stoker
