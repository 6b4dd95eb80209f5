// Divergence: inf/NaN in the loss, the gradients or the weights (train.on_nonfinite), found without
// a host synchronisation per step.
//
// Each optimizer step or-s two device flags: "the loss of one of its batches was inf/NaN" and "its
// gradients were" (one fused read-only pass, torch::_foreach_norm, skipped under a loss scaler,
// whose own inf/NaN check already skips those steps). What happens next depends on the policy:
//
//   stop  the flags of each step are kept on the device (a [2] tensor per step since the last read)
//         and read at the logging interval, at the end of an epoch and before every checkpoint
//         (Trainer::check_finite). The first non-finite step is reported with its epoch, batch and
//         learning rate, as a NonfiniteError; no checkpoint is written after it, and
//         Trainer::save_checkpoint also refuses weights that are not finite.
//   skip  the step's flags are read before its update (one synchronisation per optimizer step: the
//         decision to step or not is taken on the host, which also keeps the count exact; a masked
//         update on the device would need every optimizer to take the flag). A non-finite step
//         changes no weights; the skips are counted, and `max_skips` in a row end the run with a
//         NonfiniteError.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/types.h>

#include "common/error.h"

namespace stoker {

enum class OnNonfinite { kStop, kSkip };

struct NonfiniteOptions {
  OnNonfinite on_nonfinite = OnNonfinite::kStop;
  int64_t max_skips = 10;          // skip: non-finite steps in a row that end the run
  int64_t check_every_steps = 50;  // stop: read the flags every N optimizer steps (train.log_every_steps)

  NonfiniteOptions& set_on_nonfinite(OnNonfinite v) { on_nonfinite = v; return *this; }
  NonfiniteOptions& set_max_skips(int64_t v) { max_skips = v; return *this; }
  NonfiniteOptions& set_check_every_steps(int64_t v) { check_every_steps = v; return *this; }
};

// Where an optimizer step happened: its number (1-based, as logged), epoch and batch (0-based),
// and its learning rate.
struct StepPlace {
  int64_t step = 0;
  int64_t epoch = 0;
  int64_t batch = 0;
  double lr = 0;
};

// Training diverged: `what` ("the loss", "the gradients", "the weights") became inf/NaN at `place`;
// `skips_in_a_row` > 0 when train.on_nonfinite: skip gave up after that many.
class NonfiniteError : public Error {
 public:
  NonfiniteError(const std::string& message, std::string what, StepPlace place, int64_t skips_in_a_row)
      : Error(message), what_(std::move(what)), place_(place), skips_in_a_row_(skips_in_a_row) {}
  const std::string& what_became_nonfinite() const { return what_; }
  const StepPlace& place() const { return place_; }
  int64_t skips_in_a_row() const { return skips_in_a_row_; }

 private:
  std::string what_;
  StepPlace place_;
  int64_t skips_in_a_row_;
};

// 1 (float [1] on the tensors' device) when any of `tensors` holds inf/NaN (or an L2 norm beyond
// float32's range), else 0; no synchronisation. Undefined tensors are ignored.
torch::Tensor nonfinite_flag(const std::vector<torch::Tensor>& tensors, torch::Device device);

class NonfiniteWatch {
 public:
  NonfiniteWatch(NonfiniteOptions options, torch::Device device);
  const NonfiniteOptions& options() const { return options_; }
  bool skipping() const { return options_.on_nonfinite == OnNonfinite::kSkip; }

  // Device-side bookkeeping, safe inside a CUDA-graph capture (the flags are updated in place).
  void note_loss(const torch::Tensor& loss);
  void note_gradients(const std::vector<torch::Tensor>& params);
  // Data parallel where each rank sees part of the gradients (ZeRO-1): this step's flags become their
  // maximum over the ranks (`max_over_ranks` reduces them in place), so that every rank skips or stops
  // at the same step.
  void combine(const std::function<void(torch::Tensor&)>& max_over_ranks) { max_over_ranks(flags_); }

  // skip: reads this step's flags (a synchronisation) and, when they are set, counts the step and
  // returns true (the caller must not update the weights); throws after max_skips in a row.
  // stop: false, without reading anything.
  bool skip_this_step(const StepPlace& place);
  // Closes the step at `place`: stop keeps its flags for check(); both clear them for the next.
  void end_step(const StepPlace& place);
  // stop: reads the flags kept since the last check (one synchronisation) and throws a
  // NonfiniteError naming the first non-finite step. Nothing when none are kept.
  void check();
  // Whether check() is due after optimizer step `step` (every check_every_steps).
  bool check_due(int64_t step) const { return step % options_.check_every_steps == 0; }
  // Steps skipped since the last call (skip).
  int64_t take_skips();

 private:
  NonfiniteOptions options_;
  torch::Tensor flags_;  // float [2]: [0] a loss was non-finite, [1] the gradients were
  std::vector<torch::Tensor> kept_;     // stop: each step's flags since the last check
  std::vector<StepPlace> kept_places_;  // and where each step was
  int64_t in_a_row_ = 0, skips_ = 0;
};

}  // namespace stoker
