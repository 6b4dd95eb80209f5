// `trainer doctor`: where a recipe's accelerator starves, measured, explained and fixed.
//
// The caching ladder runs the recipe's real model, precision and training step (forward, backward,
// optimizer) over five batch sources, each removing one more stage of the input pipeline:
//
//   rung            what is cached                       what each step still pays
//   device-cached   a few batches resident on the device  compute only (the ceiling)
//   host-cached     finished batches in (pinned) memory   host -> device copy + conversion
//   decoded-cached  decoded, untransformed samples        transforms + collate + copy
//   raw-cached      the bytes each sample's read gives    decode + transforms + collate + copy
//   full            nothing                               storage reads too
//
// Each rung takes `warmup` untimed steps and then `steps` timed ones. diagnose() turns the numbers
// into words: input-bound or compute-bound, the transition that loses most and why, and the remedy
// with its predicted effect. tune() searches the loader's settings by measurement; batch_sweep()
// measures samples/s per batch size, and choose_batch (doctor/decisions.h) picks the knee from it.
// Everything is measured, nothing is assumed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "data/batch_source.h"
#include "recipe/config.h"
#include "recipe/run_plan.h"

namespace stoker {

struct DoctorOptions {
  int64_t steps = 30;           // timed steps per rung
  int64_t warmup = 5;           // untimed steps per rung first (a CUDA graph is captured in them)
  int64_t cached_batches = 4;   // batches the device- and host-cached rungs cycle through
  // Memory the raw and decoded caches may hold; 0 = half of the memory available now.
  int64_t memory_budget_bytes = 0;
  // When set, the full rung's timed steps are recorded as a timeline there (common/trace.h).
  std::string trace_path;
};

// One rung of the ladder as measured.
struct RungResult {
  std::string name;             // device-cached | host-cached | decoded-cached | raw-cached | full
  bool measured = true;         // false: not run, `note` says why
  std::string note;             // e.g. the subset a cache holds, or why the rung was not run
  int64_t steps = 0, samples = 0;
  double seconds = 0;
  double steps_per_s = 0, samples_per_s = 0;
  double ratio = 0;             // samples/s relative to device-cached
  double wait_share = 0;        // share of the timed wall time spent in next(), waiting for input
  data::StageTimes stages;      // the source's per-stage seconds over the timed steps
  double last_loss = 0;         // the last timed step's loss (read once, after the timing)
  double us_per_sample(double seconds_in_stage) const;
};

// The training step in one precision and memory layout, timed on a synthetic batch (compute only).
struct StepVariant {
  std::string precision;       // as train.precision names it
  bool channels_last = false;
  bool measured = true;        // false: not timed, `note` says why
  double ms = 0;               // per step
  std::string note;
};

// What the machine and the recipe looked like while the ladder ran.
struct LadderContext {
  std::string device;           // "cpu", "cuda:0"
  int64_t batch_size = 0;
  int64_t workers = 0;          // data.workers of the recipe
  int64_t cores = 0;            // hardware threads of this machine
  int64_t torch_threads = 0;    // libtorch's intra-op threads during the ladder
  int64_t dataset_samples = 0;  // samples in the training split
  std::string data_type, data_root;  // data.type and data.root, for the remedies' commands
  int64_t channels = 0;         // of the decoded images
  int64_t out_side = 0;         // the longer side of the samples the transforms hand out
  double full_decoded_cache_bytes = 0;  // what a decoded cache of the whole split would take
  double full_raw_cache_bytes = 0;      // and a raw one
  // run.threads: 0 (the default): on the CPU libtorch gets the cores the loader's workers leave, so
  // each worker added slows the step; with run.threads set, the step keeps its threads.
  bool threads_follow_workers = true;
  std::string precision = "fp32";  // train.precision (resolved), for remedies not to suggest what is set
  bool channels_last = false;      // train.channels_last
  std::string hardware;            // the device's features (HardwareFeatures::summary)
  // Compute-bound only: the step timed in each precision and layout the device supports.
  std::vector<StepVariant> step_variants;
  double available_bytes = 0;   // memory available (MemAvailable) when the ladder started
  double fill_seconds = 0;      // time spent filling the caches (not part of any rung)
  // The device-cached rung runs first and again last; the faster is the ceiling, and how far the
  // two differ (|a - b| / max) shows how steady the machine was while the ladder ran.
  double ceiling_spread = 0;
  // A rung that adds work to the device-cached one cannot be faster than it on a steady machine. When
  // one measured over 10% faster even after a third device-cached measurement, the ceiling was
  // slowed (a busy machine): its row takes that rung's numbers, and these say from what.
  std::string ceiling_taken_from;     // the rung whose numbers became the ceiling; "" when none
  double ceiling_measured_samples_per_s = 0;  // what device-cached measured, at best
  // train.cudnn_benchmark as the ladder ran: "" on the CPU; on CUDA whether it was on and how to
  // measure its effect (a second process: cuDNN caches the first plan per shape, whatever the flag).
  std::string cudnn_benchmark;
};

struct Diagnosis {
  bool input_bound = false;
  std::string bottleneck;       // the rung whose transition loses most ("" when compute-bound)
  int64_t suggested_workers = -1;  // data.workers that would keep up; -1: no worker change helps
  std::vector<std::string> lines;  // the diagnosis in words, first line: input-bound or compute-bound
};

struct LadderResult {
  LadderContext context;
  std::vector<RungResult> rungs;  // in the order of the table above
  Diagnosis diagnosis;
  const RungResult& rung(const std::string& name) const;
};

// Runs the ladder for `config` (its device, model, precision, data) and diagnoses it.
LadderResult run_ladder(const Config& config, const DoctorOptions& options);

// The diagnosis from the measured numbers alone (run_ladder calls it; tests call it with numbers).
Diagnosis diagnose(const LadderContext& context, const std::vector<RungResult>& rungs);

// The ladder as a table and the diagnosis, for people; and as one JSON line.
std::string format_ladder(const LadderResult& result);
std::string ladder_json(const LadderResult& result);
// `trainer doctor --save-to RUN_DIR`: ladder_json's fields and the diagnosis ("diagnosis", its lines
// joined by newlines) as RUN_DIR/doctor.json, which `trainer report RUN_DIR` shows. Returns the
// file; an error when RUN_DIR is not a directory.
std::filesystem::path save_ladder(const LadderResult& result, const std::filesystem::path& run_dir);

// ---- tuning ----
struct TuneOptions {
  double budget_seconds = 90;   // stop searching after this long (a trial under way finishes)
  int64_t steps = 20, warmup = 4;
  int64_t max_workers = 0;      // 0 = twice the cores, at most 32
  // Memory a data.cache trial's whole split may take; 0 = half of the memory available now.
  int64_t memory_budget_bytes = 0;
  // > 0 (data.autotune: start): the run the tune is for trains this many epochs; once the starting
  // settings are measured the budget also becomes at most max_share of that run at their samples/s
  // (autotune_budget, doctor/decisions.h).
  double run_epochs = 0;
  double max_share = 1;
};
struct TuneTrial {
  int64_t workers = 0, prefetch_factor = 0, device_prefetch = 0;
  data::DataCache cache = data::DataCache::kNone;  // data.cache
  double samples_per_s = 0;
  double wait_share = 0;
  std::string note;              // e.g. why a cache was not tried
  bool measured = true;
};
struct TuneResult {
  TuneTrial start, best;
  std::vector<TuneTrial> trials;  // in the order they ran, the start first
  double ceiling_samples_per_s = 0;  // device-cached: what no input setting can beat
  double seconds = 0;
  double budget_seconds = 0;      // the budget the search ran under (options', or the run's share)
  double estimated_run_seconds = 0;  // with run_epochs: the run at the starting settings' samples/s
  bool reached_ceiling = false;   // stopped because best came within 2% of the ceiling
  bool ceiling_unsteady = false;  // the ceiling measured below the start twice: the search does not stop at it
  bool on_cpu = false;            // the step trains on the CPU: loader workers take cores from it
  std::string set_line() const;   // "--set data.workers=4 --set ..."
  // What the winner means, in a sentence, when there is something to say ("" otherwise): on the CPU,
  // fewer workers than the start give the cores back to the step.
  std::string advice() const;
  std::string yaml() const;       // the same as a YAML fragment
};
// Searches data.workers (on the CPU 0 first: batches built on the training thread, every core for the
// step; then doubling, then between the best and its neighbours), then
// data.prefetch_factor and, on CUDA, data.device_prefetch, measuring the full pipeline each time.
// When that leaves the step waiting (few cores: a worker takes the model's core), it tries
// data.cache raw, then decoded, where the whole training split fits the memory budget.
TuneResult tune(const Config& config, const TuneOptions& options);
// The same for a resolved plan (data.autotune: start tunes the run's own, without a second trial).
TuneResult tune(const RunPlan& plan, const TuneOptions& options);
const char* data_cache_name(data::DataCache cache);  // none | raw | decoded, as data.cache spells it
std::string format_tune(const TuneResult& result);

// ---- batch size ----
struct BatchTrial {
  int64_t batch_size = 0;
  bool fits = true;           // false: out of device memory, or over the CPU memory budget
  double samples_per_s = 0;
  double peak_bytes = 0;      // CUDA: peak reserved by the caching allocator; CPU: peak resident set
  double lr = 0;              // optimizer.lr for this size by the recipe's rule (rescale_lr, doctor/decisions.h)
  std::string note;
};
struct BatchSweepOptions {
  int64_t min_batch = 8, max_batch = 4096;
  int64_t steps = 8, warmup = 3;
  double budget_seconds = 120;
  int64_t memory_budget_bytes = 0;  // CPU: 0 = half the memory available now
};
struct BatchSweepResult {
  std::vector<BatchTrial> trials;
  int64_t best_batch = 0;
  std::string stopped_because;
};
// Trains device-cached steps at batch sizes min_batch, 2x, 4x, ... until one does not fit, the
// budget is spent or max_batch is reached.
BatchSweepResult batch_sweep(const Config& config, const BatchSweepOptions& options);
// The sweep's table, marking the fastest size and `choice` (choose_batch, doctor/decisions.h), and
// the choice as --set flags.
struct BatchChoice;
std::string format_batch_sweep(const Config& config, const BatchSweepResult& result, const BatchChoice& choice);

}  // namespace stoker
