#include "observe/console.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "common/log.h"
#include "common/trace.h"

namespace stoker {
using trace::now_s;

Progress::Progress(bool live, int64_t every, std::FILE* out) : live_(live), every_(every), out_(out) {}

bool Progress::due(int64_t step, int64_t steps) const {
  if (!live_) return step % every_ == 0 || step == steps;
  return step == steps || last_draw_ < 0 || now_s() - last_draw_ >= 0.1;
}

void Progress::update(const ProgressUpdate& u) {
  const std::string idle = u.gpu_idle >= 0 ? fmt::format("  gpu_idle {:.1f}%", 100.0 * u.gpu_idle) : "";
  const std::string stats =
      fmt::format("loss {:.4f}  lr {:.4g}  {:.0f} samples/s  data {:.1f}%{}  ETA {}", u.loss, u.lr,
                  u.samples_per_s, 100.0 * u.data_wait, idle, format_duration(u.eta_s));
  if (!live_) {
    if (u.step % every_ != 0 && u.step != u.steps) return;
    std::fprintf(out_, "epoch %lld/%lld  step %lld/%lld  %s\n", (long long)u.epoch,
                 (long long)u.epochs, (long long)u.step, (long long)u.steps, stats.c_str());
    std::fflush(out_);
    return;
  }
  const double t = now_s();
  if (u.step != u.steps && last_draw_ >= 0 && t - last_draw_ < 0.1) return;  // <= 10 redraws/s
  last_draw_ = t;
  constexpr int kWidth = 24;
  const int filled = static_cast<int>(kWidth * u.step / std::max<int64_t>(1, u.steps));
  const std::string bar = std::string(filled, '#') + std::string(kWidth - filled, '-');
  std::fprintf(out_, "\r\033[Kepoch %lld/%lld [%s] %lld/%lld  %s", (long long)u.epoch,
               (long long)u.epochs, bar.c_str(), (long long)u.step, (long long)u.steps,
               stats.c_str());
  std::fflush(out_);
  open_line_ = true;
}

void Progress::finish_line() {
  if (open_line_) {
    std::fputc('\n', out_);
    std::fflush(out_);
    open_line_ = false;
  }
}

// ---- the sink -------------------------------------------------------------------------------------------

ConsoleSink::ConsoleSink(bool live, int64_t every, std::FILE* out) : progress_(live, every, out) {}

bool ConsoleSink::wants_progress(int64_t batch, int64_t batches) const { return progress_.due(batch, batches); }

void ConsoleSink::show(const StepRecord& r) {
  ProgressUpdate u;
  u.epoch = r.epoch + 1;
  u.epochs = r.epochs;
  u.step = r.batch;
  u.steps = r.batches;
  u.loss = r.loss;
  u.lr = r.lr;
  u.samples_per_s = r.samples_per_s;
  u.data_wait = r.data_wait;
  u.eta_s = r.eta_s;
  u.gpu_idle = gpu_idle_;
  progress_.update(u);
}

void ConsoleSink::progress(const StepRecord& r) { show(r); }

void ConsoleSink::step(const StepRecord& r) {
  if (r.gpu_idle) gpu_idle_ = *r.gpu_idle;
  show(r);
}

void ConsoleSink::epoch(const EpochRecord& e) {
  progress_.finish_line();
  const EpochResult& r = e.result;
  if (e.loss_scaling) {
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
  std::string efficiency;
  if (e.tflops) {
    efficiency = fmt::format(", {:.3g} TFLOP/s", *e.tflops);
    // Over 100% only when the peak was measured low (the CPU's peak is measured once, at the start,
    // and a busy machine then gives a low one): say so rather than print a number that means nothing.
    if (e.mfu) {
      efficiency += fmt::format(", MFU {:.1f}%{}", 100.0 * *e.mfu,
                                *e.mfu > 1.0 ? " (over 100%: the peak measured at the start was low, the machine "
                                               "was busy then)"
                                             : "");
    }
  }
  logger().info("epoch {}/{}: train loss {:.4f}, train top-1 {:.2f}%, test loss {:.4f}, test top-1 {:.2f}%, top-5 "
                "{:.2f}%{}, {} ({:.0f} samples/s, data wait {:.1f}%{})",
                r.epoch + 1, e.epochs, r.train_loss, 100.0 * r.train_top1, r.test.loss, 100.0 * r.test.top1,
                100.0 * r.test.top5, ema,
                format_duration(r.seconds), r.samples_per_s, 100.0 * r.data_wait, efficiency);
}

void ConsoleSink::end(const FitResult&) { progress_.finish_line(); }

}  // namespace stoker
