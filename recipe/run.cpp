#include "recipe/run.h"

#include <unistd.h>

#include <chrono>
#include <ctime>
#include <cmath>
#include <thread>

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <fmt/ranges.h>

#include "common/error.h"
#include "data/cache.h"
#include "data/dataset.h"
#include "models/registry.h"
#include "trainer/callbacks.h"
#include "trainer/checkpoint.h"
#include "recipe/join.h"
#include "optim/schedule.h"
#include "recipe/factory.h"
#include "recipe/param_groups.h"
#include "recipe/resolve.h"
#include "common/log.h"
#include "trainer/precision_choice.h"
#include "observe/environment.h"
#include "recipe/run_logging.h"

namespace stoker {
namespace fs = std::filesystem;

fs::path create_run_dir(const RunOptions& run) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  const fs::path parent = fs::path(run.dir) / run.name;
  std::error_code ec;
  fs::create_directories(parent, ec);
  STOKER_CHECK(!ec, "cannot create the run directory {}: {}; set run.dir to a writable folder",
               parent.string(), ec.message());
  fs::path dir = parent / stamp;
  for (int i = 2; fs::exists(dir); ++i) dir = parent / fmt::format("{}-{}", stamp, i);
  fs::create_directory(dir, ec);
  STOKER_CHECK(!ec, "cannot create the run directory {}: {}; set run.dir to a writable folder",
               dir.string(), ec.message());
  STOKER_CHECK(::access(dir.c_str(), W_OK) == 0,
               "the run directory {} is not writable; set run.dir to a writable folder", dir.string());
  return dir;
}

namespace {

// The run directory of a checkpoint `<run>/checkpoints/<file>.pt`, or its folder otherwise.
fs::path run_dir_of(const fs::path& checkpoint) {
  const fs::path folder = checkpoint.parent_path();
  return folder.filename() == "checkpoints" ? folder.parent_path() : folder;
}

// "classes: circle=0, square=1, triangle=2": the labels the run trains (the first 20 and a count).
void log_classes(const std::vector<std::string>& names) {
  if (names.empty()) return;
  std::vector<std::string> pairs;
  for (size_t i = 0; i < names.size() && i < 20; ++i) pairs.push_back(fmt::format("{}={}", names[i], i));
  logger().info("classes: {}{}", fmt::join(pairs, ", "),
                names.size() > 20 ? fmt::format(", ... ({} in all)", names.size()) : "");
}

// What the run is about to do, for the console and train.log.
void log_run_start(const TrainingSetup& setup, const fs::path& run_dir) {
  const RunPlan& plan = setup.plan;
  const Config& config = plan.config;
  const BatchArithmetic& b = plan.batches;
  Trainer& trainer = *setup.trainer;
  const data::BatchSource& train = *setup.train_source;
  const torch::Device device = plan.device;
  size_t params = 0;
  for (const auto& p : trainer.module().parameters()) params += p.numel();
  logger().info("run directory: {}", run_dir.string());
  logger().info("device: {}{}; threads: {}; model: {} ({:.2f}M parameters)", device.str(),
                device.is_cuda() ? "" : " (no CUDA device: training on the CPU)",
                torch::get_num_threads(), config.model.type(), params / 1e6);
  for (const std::string& note : setup.notes) logger().info("{}", note);
  logger().info("{}", describe_parameters(config, trainer.module(), b.lr));
  if (plan.precision.line.empty()) logger().info("hardware: {}", detect_hardware(device).summary());
  plan.precision.log();  // names the hardware itself
  // data.drop_last leaves out what does not fill a last batch (or step): say how much.
  const int64_t dropped = train.num_samples() - plan.batches_per_epoch * config.data.batch_size;
  logger().info("data: {} training / {} test samples ({}, {}x{}x{}) from {}; {} steps per epoch, {} "
                "epochs; {} loader worker(s){}{}",
                train.num_samples(), setup.loaders.test->num_samples(), config.data.dataset.type(),
                train.out_height(), train.out_width(), train.channels(),
                config.data.dataset.type() == "synthetic" ? std::string("generated samples") : config.data.root,
                plan.steps_per_epoch, config.train.epochs, config.data.workers,
                setup.loaders.pinned ? ", pinned batch buffers, device prefetch" : "",
                config.data.drop_last && dropped > 0
                    ? fmt::format("; data.drop_last leaves out {} sample(s) an epoch ({})", dropped,
                                  config.data.shuffle ? "different ones each epoch" : "always the last ones")
                    : "");
  log_classes(train.class_names());
  if (config.optimizer.lr_reference_batch > 0) {
    logger().info("learning rate: {:g} = optimizer.lr {:g} x global batch {} / optimizer.lr_reference_batch {}", b.lr,
                  config.optimizer.lr, b.global_batch, config.optimizer.lr_reference_batch);
  }
  logger().info("schedule: {}", describe_schedule(config.schedule));
  for (const std::string& line : describe_training_augment(config)) logger().info("{}", line);
  if (trainer.ema() != nullptr) {
    logger().info("EMA of the weights: decay {:g}{}, evaluated after every epoch", config.train.ema_decay,
                  config.train.ema_warmup ? " (with warm-up)" : "");
  }
  logger().info("{}; {} batch(es) of {} per optimizer step ({} samples{})", trainer.precision_summary(),
                b.accumulate_steps, config.data.batch_size, b.global_batch,
                b.shards > 1 ? " across all shards" : "");
}

// The checkpoint a run resumes from and the config saved in it (none in checkpoints written without
// one), read once: the world-size check before joining the ranks and the config check after it use both.
struct ResumeSource {
  fs::path checkpoint;
  std::optional<Config> saved;
};

ResumeSource read_resume_source(const fs::path& run_dir_or_file) {
  ResumeSource r{resolve_checkpoint(run_dir_or_file), std::nullopt};
  const std::string yaml = read_checkpoint_config(r.checkpoint);
  if (!yaml.empty()) r.saved = parse_config(yaml, r.checkpoint.string() + " (its saved config)");
  return r;
}

// train.precision: auto on resume continues in the precision the run chose when it started (its saved
// config holds the choice), whatever this machine would choose now.
void keep_resumed_precision(Config& config, const ResumeSource& source) {
  if (config.train.precision != Precision::kAuto || !source.saved) return;
  config.train.precision = source.saved->train.precision;
  logger().info("train.precision: auto -> {}, the precision {} trained in", precision_name(config.train.precision),
                source.checkpoint.string());
}

// data.autotune on resume: the loader settings the run's start tuned (its saved config holds them) are
// kept, not tuned again.
void keep_autotuned(Config& config, const ResumeSource& source) {
  if (config.data.autotune == "off" || !source.saved) return;
  const data::DataSettings& saved = source.saved->data;
  config.data.workers = saved.workers;
  config.data.prefetch_factor = saved.prefetch_factor;
  config.data.device_prefetch = saved.device_prefetch;
  config.data.cache = saved.cache;
  logger().info("data.autotune: {}: keeping the loader settings the run's start tuned, as {} holds them: "
                "workers {}, prefetch_factor {}, device_prefetch {}, cache {}",
                config.data.autotune, source.checkpoint.string(), saved.workers, saved.prefetch_factor,
                saved.device_prefetch,
                saved.cache == data::DataCache::kNone ? "none" : data::cache_level_name(data::cache_level_of(saved.cache)));
}

// data.autotune: start on a new run: the request's hook tunes the loader settings (one process only)
// and the plan takes them.
std::optional<AutotuneOutcome> autotune_new_run(const TrainRequest& request, RunPlan& plan,
                                                const Distributed& distributed) {
  if (plan.config.data.autotune != "start") return std::nullopt;
  STOKER_CHECK(request.autotune, "data.autotune: start needs the doctor: this program does not set "
               "TrainRequest::autotune (stoker::autotune_at_start, doctor/autotune.h); set data.autotune: off");
  STOKER_CHECK(distributed.world_size() == 1,
               "data.autotune: start tunes one process's loader, and this run has {} ranks; tune on one of "
               "its machines with `trainer doctor --config RECIPE --tune --write RECIPE` and set data.autotune: off",
               distributed.world_size());
  AutotuneOutcome out = request.autotune(plan);
  apply_loader_settings(plan, out.config);
  return out;
}

// Compares the config a run is resumed with to the one saved in its checkpoint: refuses changes
// that break exactness unless allowed, and another model.type always; returns one line per
// difference for the log.
std::vector<std::string> check_resume_config(const Config& config, const ResumeSource& source, bool allow) {
  const fs::path& checkpoint = source.checkpoint;
  if (!source.saved) {
    return {fmt::format("{} holds no saved config; resuming with the given one, unchecked", checkpoint.string())};
  }
  const Config& saved = *source.saved;
  if (saved.model.type() != config.model.type()) {  // not even --allow-config-change: the weights cannot load
    STOKER_FAIL("cannot resume {} with model.type {}: it holds {} weights, which model.type {} cannot load; start "
                "a new run for it (--config with --set model.type={}, without --resume)",
                checkpoint.string(), config.model.type(), saved.model.type(), config.model.type(), config.model.type());
  }
  std::vector<std::string> lines, breaking;
  for (const ConfigDifference& d : config_differences(saved, config)) {
    lines.push_back(fmt::format("config change on resume: {}: {} -> {}{}", d.key, d.before, d.after,
                                d.breaks_exactness ? " (breaks exactness)" : ""));
    if (d.breaks_exactness) breaking.push_back(fmt::format("{} ({} -> {})", d.key, d.before, d.after));
  }
  if (breaking.empty() || allow) return lines;
  STOKER_FAIL("cannot resume {} with a different {}: {}; the run could not continue exactly as it started. "
               "Resume with its saved config (leave out --config and those --set), or pass "
               "--allow-config-change to change them anyway (e.g. --set train.epochs=N "
               "--allow-config-change to train a finished run further)",
               checkpoint.string(), breaking.size() == 1 ? "value of this key" : "value of these keys",
               fmt::join(breaking, ", "));
}

// The Trainer's report of the first inf/NaN step, with the checkpoint to continue from.
TrainingDiverged diverged(const NonfiniteError& e, const Config& config,
                          const std::optional<CheckpointCallback::SavedCheckpoint>& saved,
                          const std::optional<fs::path>& resumed_from, int64_t resumed_step) {
  std::optional<fs::path> good;
  int64_t good_step = 0;
  if (saved) {
    good = saved->path;
    good_step = saved->step;
  } else if (resumed_from) {
    good = resumed_from;
    good_step = resumed_step;
  }
  const std::string policy = e.skips_in_a_row() > 0 ? "" : " (train.on_nonfinite: stop)";
  const std::string after =
      good ? fmt::format("no checkpoint was written after it; the last good one is {} (step {})", good->string(),
                         good_step)
           : std::string("no checkpoint had been written yet");
  return TrainingDiverged(fmt::format("training diverged: {}{}; {}", e.what(), policy, after), good, good_step,
                          config.optimizer.lr / 10);
}

// Loads the checkpoint resumed from (logging the config changes) and saves the resolved config in
// the run directory (none: a rank that does not write, see Distributed::writes); returns the step
// resumed at (0 for a new run). A run resumed with another optimizer.type (a change
// --allow-config-change let through) starts the new optimizer's state afresh: the checkpoint holds
// the old type's.
int64_t start_or_resume(Trainer& trainer, const RunPlan& plan, const std::optional<ResumeSource>& resume,
                        const std::vector<std::string>& config_changes, const fs::path& run_dir) {
  const Config& config = plan.config;
  const std::string& resolved = plan.yaml;
  logger().debug("resolved config:\n{}", resolved);
  if (!resume) {
    if (!run_dir.empty()) write_file_atomically(run_dir / "config.yaml", resolved);
    return 0;
  }
  const std::string& optimizer = config.optimizer.algorithm.type();
  const std::string was = resume->saved ? resume->saved->optimizer.algorithm.type() : optimizer;
  trainer.load_checkpoint(resume->checkpoint, /*optimizer_state=*/was == optimizer);
  for (const std::string& line : config_changes) logger().warn("{}", line);
  if (was != optimizer) {
    logger().info("optimizer.type: {} (was {}): the checkpoint's {} state is left out; {} starts with its own",
                  optimizer, was, was, optimizer);
  }
  logger().info("resuming {} at epoch {}, batch {} (step {})", resume->checkpoint.string(), trainer.state().epoch + 1,
                trainer.state().batch_in_epoch, trainer.state().step);
  // Keep the first run's config; record the one this part ran with.
  const fs::path first = run_dir / "config.yaml";
  const fs::path resumed = run_dir / fmt::format("config.resumed-step{}.yaml", trainer.state().step);
  if (!run_dir.empty()) write_file_atomically(fs::exists(first) ? resumed : first, resolved);
  return trainer.state().step;
}

// Under a launcher: when this rank fails, its error is left for the others (ProcessGroup::
// report_failure); when a collective fails here for a lost connection, another rank stopped or died
// first: the error says which and why (ProcessGroup::explain_lost_peer, within seconds); when the
// peer watchdog aborted the collectives (a peer stopped answering), its finding says which.
template <typename F>
auto naming_peers(const Distributed& d, F f) -> decltype(f()) {
  if (!d.group) return f();
  try {
    return f();
  } catch (const std::exception& e) {
    const std::string what = e.what();
    const std::string first = what.substr(0, what.find('\n'));
    if (const std::optional<std::string> lost = d.group->lost_peer()) {
      // The peer watchdog aborted the collectives (NCCL: a dead peer is not noticed otherwise).
      STOKER_FAIL("rank {} of {}: {}; here, the collectives were aborted: {}", d.rank(), d.world_size(), *lost, first);
    }
    if (!distributed::lost_connection(first)) {
      d.group->report_failure(first);
      throw;
    }
    const std::string here = first.substr(0, first.find("; another rank has probably"));
    STOKER_FAIL("rank {} of {}: {}; here, a collective operation failed: {}", d.rank(), d.world_size(),
                d.group->explain_lost_peer(std::chrono::seconds(3)), here);
  }
}

// The run's callbacks: stopping on signals and early stopping on every rank; logging, metrics,
// checkpoints and the trace where the run directory is written (`run_dir` empty: a rank that does
// not write). Returns the checkpoint callback (nullptr on such a rank).
std::shared_ptr<CheckpointCallback> add_run_callbacks(Trainer& trainer, const RunPlan& plan, const fs::path& run_dir,
                                                      bool live_progress, const data::InputShape& shape) {
  const Config& config = plan.config;
  trainer.add_callback(std::make_shared<StopOnSignalCallback>());
  if (config.logging.sample_digests) add_sample_digest_log(trainer);
  std::shared_ptr<CheckpointCallback> checkpoints;
  if (!run_dir.empty()) {
    check_stop_requested("counting the model's FLOPs (logging.flops)");
    const Efficiency efficiency = measure_efficiency(config, shape, plan.device);
    const std::shared_ptr<MetricsLogger> metrics = add_run_metrics(trainer, plan, run_dir, live_progress, efficiency);
    if (auto by_epoch = training_flops_by_epoch(config, shape.channels)) {
      metrics->set_flops_at_epoch(std::move(by_epoch));
    }
    check_stop_requested("counting the model's FLOPs (logging.flops)");
    checkpoints = std::make_shared<CheckpointCallback>(run_dir / "checkpoints", config.checkpoint);
    trainer.add_callback(checkpoints);
  } else if (trainer.strategy().collective_checkpoint()) {
    // Each checkpoint gathers the sharded optimizer state on rank 0: this rank takes part, writing nothing.
    trainer.add_callback(std::make_shared<CheckpointCallback>(fs::path(), config.checkpoint));
  }
  if (config.train.early_stopping.patience > 0) {
    trainer.add_callback(std::make_shared<EarlyStoppingCallback>(config.train.early_stopping));
  }
  if (!run_dir.empty()) trainer.add_callback(std::make_shared<TraceCallback>(run_dir / "trace.json", config.train.trace));
  return checkpoints;
}

// Where training stands at the end, and the last evaluation (of this call, or of the model as it is
// when nothing was left to train).
void record_final_results(Trainer& trainer, TrainOutcome& outcome) {
  outcome.state = trainer.state();
  if (!outcome.fit.epochs.empty()) {
    outcome.final_test = outcome.fit.epochs.back().test;
    outcome.final_ema_test = outcome.fit.epochs.back().ema_test;
  } else if (!outcome.fit.interrupted) {
    outcome.final_test = trainer.evaluate();
    if (trainer.ema() != nullptr) outcome.final_ema_test = trainer.evaluate_ema();
  }
}

// The run directory: the resumed checkpoint's, or a new one made by the rank that writes (none for the
// others); where this rank writes, checked writable and its train.log attached.
fs::path open_run_dir(const std::optional<fs::path>& resume_from, const RunOptions& run, bool writes) {
  const fs::path dir = resume_from ? run_dir_of(*resume_from) : writes ? create_run_dir(run) : fs::path();
  if (writes) {
    STOKER_CHECK(::access(dir.c_str(), W_OK) == 0, "the run directory {} is not writable", dir.string());
    attach_log_file(dir / "train.log");
  }
  return dir;
}

// run_training once this process has joined its ranks (or is alone).
TrainOutcome train_joined(const TrainRequest& request, const std::optional<ResumeSource>& resume, Config& config,
                          const Distributed& distributed) {
  const bool writes = distributed.writes();  // only rank 0 writes the run directory
  // Everything that can be checked is checked before the run directory is made.
  std::optional<fs::path> resume_from;
  std::vector<std::string> config_changes;
  if (resume) {
    resume_from = resume->checkpoint;
    keep_resumed_precision(config, *resume);
    keep_autotuned(config, *resume);
  }
  RunPlan plan = resolve_plan(config, distributed);
  // Compared as resolved: the model keys the data decides (a ViT's model.image_size: 0) are filled
  // in as the saved config has them. (No precision trial ran: a resumed run keeps its precision.)
  if (resume) config_changes = check_resume_config(plan.config, *resume, request.allow_config_change);
  plan.resuming = resume.has_value();
  std::optional<AutotuneOutcome> tuned;
  if (!resume) tuned = autotune_new_run(request, plan, distributed);
  TrainingSetup setup = make_training(plan, distributed);
  config = plan.config;  // train.precision: auto resolved, the loader as autotune chose it
  Trainer& trainer = *setup.trainer;

  TrainOutcome outcome;
  outcome.run_dir = open_run_dir(resume_from, config.run, writes);
  for (const std::string& note : request.config_notes) logger().info("{}", note);
  if (tuned) {
    logger().info("{}", tuned->line);
    if (writes) write_file_atomically(outcome.run_dir / "doctor.json", tuned->doctor_json);
  }
  const int64_t resumed_step =
      start_or_resume(trainer, plan, resume, config_changes, writes ? outcome.run_dir : fs::path());
  if (writes && !fs::exists(outcome.run_dir / "environment.json")) write_environment(outcome.run_dir, plan.device);

  log_run_start(setup, outcome.run_dir);
  const std::shared_ptr<CheckpointCallback> checkpoints =
      add_run_callbacks(trainer, plan, writes ? outcome.run_dir : fs::path(), request.live_progress,
                        setup.train_source->shape());

  if (trainer.state().epoch >= config.train.epochs) {
    logger().info("the run already finished {} epoch(s); raise train.epochs to train further "
                  "(--set train.epochs=N --allow-config-change)",
                  trainer.state().epoch);
  }
  try {
    outcome.fit = trainer.fit();
  } catch (const NonfiniteError& e) {
    const std::optional<CheckpointCallback::SavedCheckpoint> saved =
        checkpoints ? checkpoints->last_saved() : std::optional<CheckpointCallback::SavedCheckpoint>{};
    throw diverged(e, config, saved, resume_from, resumed_step);
  }
  record_final_results(trainer, outcome);
  if (!writes && outcome.fit.interrupted) {
    logger().warn("stopped with the other ranks at step {}; rank 0 saved the checkpoint", trainer.state().step);
  }
  return outcome;
}

// A checkpoint that records each rank's batch resumes on any number of processes (the Trainer puts it
// at the same place of the epoch's order and checks the global batch). One from before that was
// recorded must be resumed by as many processes as trained it (its world size, or for older ones the
// saved config's data.shard_count).
void check_resume_world_size(const std::optional<ResumeSource>& resume, const Config& config) {
  if (!resume || config.run.distributed == "off") return;
  const fs::path& checkpoint = resume->checkpoint;
  if (read_checkpoint_batch_size(checkpoint) > 0) return;
  int64_t was = read_checkpoint_world_size(checkpoint);
  if (was == 0) {
    if (!resume->saved || resume->saved->run.distributed == "off") return;  // sharded by hand, or unknown
    was = resume->saved->data.shard_count;
  }
  const int64_t is = std::max<int64_t>(1, distributed::launch_info_from_environment().world_size);
  if (was == is) return;
  const std::string how =
      was == 1 ? std::string("as one process (no launcher)")
               : fmt::format("on {} ranks, e.g. python -m torch.distributed.run --nproc-per-node {} --no-python "
                             "trainer --resume {}",
                             was, was, run_dir_of(checkpoint).string());
  STOKER_FAIL("cannot resume {} on {} process(es): it was trained by {} rank(s), and a different world size is "
              "not supported (each rank's position in the epoch and the global batch depend on it); resume it {}",
              checkpoint.string(), is, was, how);
}

}  // namespace

TrainOutcome run_training(const TrainRequest& request) {
  Config config = request.config;
  const std::optional<ResumeSource> resume =
      request.resume ? std::optional<ResumeSource>(read_resume_source(*request.resume)) : std::nullopt;
  check_resume_world_size(resume, config);
  // Launched as one of several processes (torchrun, srun): join them, take this rank's data shard.
  const Distributed distributed = start_distributed(config, request.process_group);
  return naming_peers(distributed, [&] { return train_joined(request, resume, config, distributed); });
}

}  // namespace stoker
