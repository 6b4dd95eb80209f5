#include "trainer/callbacks.h"

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <csignal>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include "common/error.h"
#include "common/log.h"
#include "common/trace.h"
#include "trainer/evaluate.h"

namespace stoker {

// ---- checkpoints ------------------------------------------------------------------------------------

CheckpointCallback::CheckpointCallback(const std::filesystem::path& folder, CheckpointOptions options)
    : folder_(folder), options_(std::move(options)) {
  if (!folder_.empty()) std::filesystem::create_directories(folder_);
}

void CheckpointCallback::save(Trainer& trainer, const char* name) {
  if (folder_.empty()) {  // takes part in the save, writes nothing
    trainer.save_checkpoint({});
    return;
  }
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
    if (folder_.empty()) return;
    logger().info("new best {} = {:.4f} at epoch {}: saved checkpoints/best.pt", options.best_metric,
                  value, r.epoch + 1);
  }
}

void CheckpointCallback::on_fit_end(Trainer& trainer, const FitResult& result) {
  if (result.interrupted && options_.save_last) {
    save(trainer, "last.pt");
    if (folder_.empty()) return;
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
  static const char kSaid[] =
      "\nstoker: stop requested: stopping after the current step (send it again to end at once)\n";
  const ssize_t written = ::write(STDERR_FILENO, kSaid, sizeof kSaid - 1);  // async-signal-safe
  (void)written;
}
}  // namespace

void install_stop_signal_handlers() {
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

bool stop_signal_received() { return g_stop_signal.load(); }

void reset_stop_signal() { g_stop_signal.store(false); }

void check_stop_requested(const std::string& phase) {
  if (!stop_signal_received()) return;
  throw StopRequested(fmt::format("stopped by a signal (Ctrl-C or SIGTERM) during {}, before training started; "
                                  "nothing was trained or written",
                                  phase));
}

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
