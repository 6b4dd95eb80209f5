// The doctor's decisions from measured numbers (decisions.h): the knee of a batch sweep, the
// learning rate for it, and the performance contract.
#include "doctor/decisions.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "common/error.h"
#include "optim/optim.h"

namespace stoker {
namespace {

bool power_of_two(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

std::string percent(double fraction) { return fmt::format("{:.1f}%", 100.0 * fraction); }

// Samples/s gained per doubling of the batch from `from` to `to`.
double gain_per_doubling(const BatchTrial& from, const BatchTrial& to) {
  const double doublings =
      std::log2(static_cast<double>(to.batch_size) / static_cast<double>(from.batch_size));
  return std::pow(to.samples_per_s / std::max(1e-12, from.samples_per_s), 1.0 / doublings) - 1.0;
}

// The trials the knee may be chosen from, smallest first; `lines` says why any fitting one is left out.
std::vector<BatchTrial> candidates(const Config& config, const std::vector<BatchTrial>& trials,
                                   std::vector<std::string>& lines) {
  std::vector<BatchTrial> out;
  for (const BatchTrial& t : trials) {
    if (!t.fits || t.samples_per_s <= 0) continue;
    if (!power_of_two(t.batch_size) && t.batch_size % 8 != 0) {
      lines.push_back(fmt::format("batch {} left out: neither a power of two nor a multiple of 8", t.batch_size));
      continue;
    }
    Config at = config;
    at.data.batch_size = t.batch_size;
    const std::string problem = batch_arithmetic(at).problem;
    if (!problem.empty()) {
      lines.push_back(fmt::format("batch {} left out: {}", t.batch_size, problem));
      continue;
    }
    out.push_back(t);
  }
  std::sort(out.begin(), out.end(), [](const BatchTrial& a, const BatchTrial& b) { return a.batch_size < b.batch_size; });
  return out;
}

}  // namespace

LrRescale rescale_lr(const Config& config, int64_t batch_size) {
  STOKER_CHECK(batch_size > 0 && config.data.batch_size > 0, "rescale_lr needs positive batch sizes");
  LrRescale r;
  r.lr = config.optimizer.lr;
  const int64_t from = config.data.batch_size;
  const double ratio = static_cast<double>(batch_size) / static_cast<double>(from);
  const std::string& type = config.optimizer.algorithm.type();
  const LrScaling scaling = optimizer_registry().get(type).lr_scaling;
  if (config.optimizer.lr_reference_batch > 0) {
    r.rule = fmt::format("optimizer.lr_reference_batch is {}: the run scales optimizer.lr linearly with the batch "
                         "itself (effective {:.4g} at batch {})",
                         config.optimizer.lr_reference_batch, batch_arithmetic(config).lr * ratio, batch_size);
  } else if (config.train.effective_batch_size > 0) {
    r.rule = fmt::format("train.effective_batch_size keeps {} samples per optimizer step: optimizer.lr stays",
                         config.train.effective_batch_size);
  } else if (scaling == LrScaling::kLinear) {
    r.lr = config.optimizer.lr * ratio;
    r.rule = fmt::format("linear scaling for {}: {:.4g} x {}/{}", type, config.optimizer.lr, batch_size, from);
  } else if (scaling == LrScaling::kSqrt) {
    r.lr = config.optimizer.lr * std::sqrt(ratio);
    r.rule = fmt::format("square-root scaling for {} (its type's rule): {:.4g} x sqrt({}/{})", type,
                         config.optimizer.lr, batch_size, from);
  } else {
    r.rule = fmt::format("no scaling rule is known for optimizer.type {}: optimizer.lr stays; check it", type);
  }
  r.changed = batch_size != from && r.lr != config.optimizer.lr;
  return r;
}

std::string BatchChoice::set_line() const {
  if (batch_size <= 0) return "";
  std::string line = fmt::format("--set data.batch_size={}", batch_size);
  if (lr.changed) line += fmt::format(" --set optimizer.lr={:.4g}", lr.lr);
  return line;
}

BatchChoice choose_batch(const Config& config, const std::vector<BatchTrial>& trials, double knee) {
  STOKER_CHECK(knee > 0, "doctor --knee must be positive (a fraction of samples/s per doubling, e.g. 0.1), got {}",
               knee);
  BatchChoice choice;
  const std::vector<BatchTrial> sizes = candidates(config, trials, choice.lines);
  if (sizes.empty()) {
    choice.lines.push_back("no batch size fits: nothing to choose");
    return choice;
  }
  // The knee: the smallest size that no larger one beats by `knee` per doubling (a single slow
  // measurement on the way up does not stop the walk).
  size_t at = 0;
  for (; at + 1 < sizes.size(); ++at) {
    size_t most = at + 1;
    for (size_t t = at + 1; t < sizes.size(); ++t) {
      if (gain_per_doubling(sizes[at], sizes[t]) > gain_per_doubling(sizes[at], sizes[most])) most = t;
    }
    const double gain = gain_per_doubling(sizes[at], sizes[most]);
    if (gain < knee) {
      choice.lines.push_back(fmt::format(
          "knee at batch {}: no larger batch gains {} samples/s per doubling over it (the most: batch {}, {}, "
          "{:.1f} -> {:.1f})",
          sizes[at].batch_size, percent(knee), sizes[most].batch_size, percent(gain), sizes[at].samples_per_s,
          sizes[most].samples_per_s));
      break;
    }
  }
  if (at + 1 == sizes.size()) {
    choice.lines.push_back(fmt::format("every smaller batch had a larger one gaining at least {} samples/s per "
                                       "doubling: the largest measured, batch {}",
                                       percent(knee), sizes[at].batch_size));
  }
  choice.batch_size = sizes[at].batch_size;
  choice.lr = rescale_lr(config, choice.batch_size);
  choice.lines.push_back("learning rate: " + choice.lr.rule);
  return choice;
}

ContractVerdict check_contract(const std::vector<RungResult>& rungs, double min_ratio) {
  STOKER_CHECK(min_ratio > 0 && min_ratio <= 1, "doctor --min-ratio must be in (0, 1], got {}", min_ratio);
  const RungResult* ceiling = nullptr;
  const RungResult* full = nullptr;
  for (const RungResult& r : rungs) {
    if (!r.measured) continue;
    if (r.name == "device-cached") ceiling = &r;
    if (r.name == "full") full = &r;
  }
  ContractVerdict v;
  if (ceiling == nullptr || full == nullptr || ceiling->samples_per_s <= 0) {
    v.line = fmt::format("contract broken: the ladder has no measured {} rung to compare",
                         ceiling == nullptr || ceiling->samples_per_s <= 0 ? "device-cached" : "full");
    return v;
  }
  v.ratio = full->samples_per_s / ceiling->samples_per_s;
  v.kept = v.ratio >= min_ratio;
  v.line = fmt::format("contract {}: the full pipeline trains {:.1f} samples/s, {:.2f} of the device-cached ceiling "
                       "of {:.1f} ({} the minimum of {:.2f})",
                       v.kept ? "kept" : "broken", full->samples_per_s, v.ratio, ceiling->samples_per_s,
                       v.kept ? "at or above" : "below", min_ratio);
  return v;
}

double autotune_budget(double budget_s, double max_share, double estimated_run_s) {
  STOKER_CHECK(budget_s > 0 && max_share > 0 && max_share <= 1 && estimated_run_s >= 0,
               "autotune_budget needs a positive budget, a share in (0, 1] and a run length >= 0");
  return std::min(budget_s, max_share * estimated_run_s);
}

}  // namespace stoker
