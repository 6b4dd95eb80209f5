// The handlers of the `trainer` program's subcommands (see trainer_commands.h).
#include "apps/trainer_commands.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "common/log.h"
#include "data/pack.h"
#include "doctor/autotune.h"
#include "doctor/decisions.h"
#include "doctor/doctor.h"
#include "doctor/recipe_write.h"
#include "doctor/step_bench.h"
#include "observe/report.h"
#include "recipe/config.h"
#include "recipe/device.h"
#include "recipe/export.h"
#include "recipe/factory.h"
#include "recipe/run.h"
#include "recipe/tasks.h"
#include "trainer/callbacks.h"

namespace stoker::apps {
namespace {

// With --print-config: prints the resolved config, with parse_config's notes (keys a --set type
// switch dropped) above it as YAML comments, so that the output still reads back as a recipe.
bool print_config(const Args& args, const stoker::Config& config, const std::vector<std::string>& notes) {
  if (!args.print_config) return false;
  for (const std::string& note : notes) std::printf("# %s\n", note.c_str());
  std::fputs(stoker::config_to_yaml(config).c_str(), stdout);
  return true;
}

// The recipe with the --set overrides applied; with --print-config, prints it and returns nothing.
std::optional<stoker::Config> load_or_print(const Args& args) {
  std::vector<std::string> notes;
  stoker::Config config = stoker::load_config(args.config, args.overrides, &notes);
  if (print_config(args, config, notes)) return std::nullopt;
  for (const std::string& note : notes) stoker::logger().info("{}", note);
  return config;
}

void log_summary(const stoker::Config& config, const stoker::TrainOutcome& out, const std::string& program) {
  auto& log = stoker::logger();
  const auto& state = out.state;
  log.info("---- summary ----");
  log.info("run directory:   {}", out.run_dir.string());
  log.info("epochs done:     {} of {} ({} optimizer steps)", state.epoch, config.train.epochs, state.step);
  if (out.final_test.samples > 0) {
    log.info("final test:      top-1 {:.2f}%, top-5 {:.2f}%, loss {:.4f} ({} samples{})",
             100.0 * out.final_test.top1, 100.0 * out.final_test.top5, out.final_test.loss, out.final_test.samples,
             out.final_test.excluded > 0 ? fmt::format("; {} unreadable left out", out.final_test.excluded) : "");
  }
  if (out.final_ema_test.samples > 0) {
    log.info("final EMA test:  top-1 {:.2f}%, top-5 {:.2f}%, loss {:.4f}", 100.0 * out.final_ema_test.top1,
             100.0 * out.final_ema_test.top5, out.final_ema_test.loss);
  }
  if (out.fit.stopped_early) log.info("stopped early:   train.early_stopping (see the log above)");
  if (state.best_epoch >= 0) {
    log.info("best {}:  {:.4f} at epoch {} (checkpoints/best.pt)", config.checkpoint.best_metric,
             state.best_metric, state.best_epoch + 1);
  }
  log.info("training time:   {} in this invocation", stoker::format_duration(out.fit.seconds));
  if (!out.run_dir.empty()) {
    const bool best = config.checkpoint.save_best && state.best_epoch >= 0;
    const std::string run = out.run_dir.string() + (best ? ":best" : "");
    log.info("next:            {} eval --checkpoint {}; {} predict --checkpoint {} IMAGE...; {} export --checkpoint "
             "{} --output model.ts",
             program, run, program, run, program, run);
  }
}

// The command that goes on from a diverged run's last good checkpoint (or starts again) with
// optimizer.lr ten times lower.
std::string diverged_command(const Args& args, const stoker::TrainingDiverged& e) {
  // A checkpoint holds its run's config: resuming needs only the new rate (a change that keeps the
  // run's data and schedule, so it needs no --allow-config-change).
  std::string command = args.program;
  if (e.last_good) {
    command += " --resume " + e.last_good->string();
  } else {
    command += " --config " + args.config;
    for (const std::string& set : args.overrides) {
      if (set.rfind("optimizer.lr=", 0) != 0) command += " --set " + set;
    }
  }
  return command + fmt::format(" --set optimizer.lr={:g}", e.lower_lr);
}

// The config saved in `checkpoint`, with --set applied.
stoker::Config saved_config(const std::filesystem::path& checkpoint, const std::vector<std::string>& overrides,
                            std::vector<std::string>& notes) {
  const std::string yaml = stoker::read_checkpoint_config(checkpoint);
  STOKER_CHECK(!yaml.empty(), "checkpoint {} holds no config; pass the run's recipe with --config", checkpoint.string());
  return stoker::parse_config(yaml, checkpoint.string() + " (its saved config)", overrides, &notes);
}

// train's config: the recipe (--config), or with --resume and no --config the config saved in the
// checkpoint; --set applies to either (`notes`: what it dropped, for the run's log). With
// --print-config, prints it and returns nothing.
std::optional<stoker::Config> train_config(const Args& args, std::vector<std::string>& notes) {
  const stoker::Config config = args.config.empty()
                                    ? saved_config(stoker::resolve_checkpoint(args.resume), args.overrides, notes)
                                    : stoker::load_config(args.config, args.overrides, &notes);
  if (print_config(args, config, notes)) return std::nullopt;
  return config;
}

std::string percent(double fraction) { return fmt::format("{:.2f}%", 100.0 * fraction); }

// The run's report.html, written when training ends (stopped runs too), so that every run can be
// opened in a browser at once. The run is saved either way: a report that cannot be written is a
// warning that says how to try again.
void write_run_report(const std::filesystem::path& run_dir) {
  if (run_dir.empty()) return;  // a rank other than 0: rank 0 writes the run directory
  try {
    stoker::ReportRequest request;
    request.run = run_dir;
    const std::filesystem::path written = stoker::write_report(request);
    stoker::logger().info("report: {} (open it in a browser; TensorBoard: tensorboard --logdir {})", written.string(),
                          run_dir.parent_path().parent_path().string());
  } catch (const std::exception& e) {
    stoker::logger().warn("the run's report.html was not written: {}; `trainer report {}` tries again", e.what(),
                          run_dir.string());
  }
}

}  // namespace

int train(const Args& args) {
  stoker::TrainRequest request;
  std::optional<stoker::Config> config = train_config(args, request.config_notes);
  if (!config) return 0;
  request.config = *config;
  if (!args.resume.empty()) request.resume = args.resume;
  request.allow_config_change = args.allow_config_change;
  request.autotune = stoker::autotune_at_start;  // data.autotune: start
  request.live_progress = args.progress == "bar" || (args.progress == "auto" && ::isatty(STDOUT_FILENO));
  stoker::install_stop_signal_handlers();

  auto& log = stoker::logger();
  log.info("stoker trainer: {}{}", args.config.empty() ? "the saved config of " + args.resume : args.config,
           args.overrides.empty() ? "" : fmt::format(" with --set {}", fmt::join(args.overrides, " --set ")));
  stoker::TrainOutcome out;
  try {
    out = stoker::run_training(request);
  } catch (const stoker::TrainingDiverged& e) {
    log.error("{}", e.what());
    log.error("{} with a lower learning rate: {}", e.last_good ? "continue from there" : "start again",
              diverged_command(args, e));
    return 1;
  }
  log_summary(*config, out, args.program);
  write_run_report(out.run_dir);
  if (out.fit.interrupted) {
    // The checkpoint holds the config this run trained with: resuming needs nothing else.
    // (A rank other than 0 of a distributed run does not know the run directory: rank 0 says it.)
    if (!out.run_dir.empty()) log.warn("stopped early; continue with: {} --resume {}", args.program, out.run_dir.string());
    return 130;
  }
  return 0;
}

int bench_data(const Args& args) {
  const std::optional<stoker::Config> loaded = load_or_print(args);
  if (!loaded) return 0;
  const stoker::Config& config = *loaded;
  const torch::Device device = stoker::use_device(config.run.device);  // the pinned buffers' GPU too
  stoker::configure_threads(config.run.threads, config.data.workers, device.is_cpu());
  const std::shared_ptr<stoker::data::Loader> built =
      stoker::make_loader(config, device, args.split, args.output == "uint8");
  stoker::data::Loader& loader = *built;
  auto& log = stoker::logger();
  log.info("bench-data: {} ({} split: {}, {} output {}x{}x{}, batch {}, {} worker(s), device {})",
           args.config, args.split, config.data.dataset.type(), args.output, loader.out_height(), loader.out_width(), loader.channels(),
           loader.options().batch_size, config.data.workers, device.str());
  const stoker::data::DataBenchResult r = stoker::data::bench_loader(loader, args.batches);
  const double n = static_cast<double>(std::max<int64_t>(1, r.samples));
  const double cores = r.seconds > 0 ? r.cpu_seconds / r.seconds : 0;
  std::printf("samples/s          %10.1f   (%lld batches, %lld samples in %.2f s)\n", r.samples_per_s,
              (long long)r.batches, (long long)r.samples, r.seconds);
  std::printf("CPU in use         %10.2f   cores (user + system time / wall time)\n", cores);
  std::printf("samples/s per core %10.1f\n", cores > 0 ? r.samples_per_s / cores : 0.0);
  std::printf("stage              us/sample (CPU time, summed over workers)\n");
  std::printf("  read             %10.1f\n", 1e6 * r.stages.read / n);
  std::printf("  decode           %10.1f\n", 1e6 * r.stages.decode / n);
  std::printf("  transform        %10.1f   (crop/resize/flip into the batch slot, then rand_augment etc.)\n", 1e6 * r.stages.transform / n);
  std::printf("  copy + convert   %10.1f   (to the device, uint8 -> normalised float; caller)\n", 1e6 * r.stages.copy / n);
  std::printf("  wait             %10.1f   (caller blocked waiting for workers)\n", 1e6 * r.stages.wait / n);
  std::printf("read               %10.1f   KB and %.2f file opens a sample (%.1f MB/s, %.0f opens/s)\n",
              1e-3 * static_cast<double>(r.stages.read_bytes) / n, static_cast<double>(r.stages.read_opens) / n,
              r.seconds > 0 ? 1e-6 * static_cast<double>(r.stages.read_bytes) / r.seconds : 0.0,
              r.seconds > 0 ? static_cast<double>(r.stages.read_opens) / r.seconds : 0.0);
  if (r.stages.bad_samples > 0) std::printf("bad samples skipped: %lld\n", (long long)r.stages.bad_samples);
  nlohmann::ordered_json json;
  json["samples_per_s"] = r.samples_per_s;
  json["cpu_cores"] = cores;
  json["samples_per_s_per_core"] = cores > 0 ? r.samples_per_s / cores : 0.0;
  json["read_us"] = 1e6 * r.stages.read / n;
  json["decode_us"] = 1e6 * r.stages.decode / n;
  json["transform_us"] = 1e6 * r.stages.transform / n;
  json["copy_us"] = 1e6 * r.stages.copy / n;
  json["wait_us"] = 1e6 * r.stages.wait / n;
  json["read_bytes_per_sample"] = static_cast<double>(r.stages.read_bytes) / n;
  json["read_opens_per_sample"] = static_cast<double>(r.stages.read_opens) / n;
  json["workers"] = config.data.workers;
  json["batch_size"] = loader.options().batch_size;
  std::printf("%s\n", json.dump().c_str());
  return 0;
}

int bench_step(const Args& args) {
  const std::optional<stoker::Config> loaded = load_or_print(args);
  if (!loaded) return 0;
  const stoker::Config& config = *loaded;
  auto& log = stoker::logger();
  log.info("bench-step: {} (model {}, precision {}, channels_last {}, cuda_graph {}, batch {})", args.config,
           config.model.type(), precision_name(config.train.precision), config.train.channels_last, config.train.cuda_graph,
           config.data.batch_size);
  const stoker::StepBenchResult r = stoker::bench_train_step(config, args.steps);
  std::printf("ms/step   %10.3f   (%lld steps in %.2f s on %s%s)\n", r.ms_per_step, (long long)r.steps,
              r.seconds, r.device.c_str(), r.graph ? ", CUDA graph replays" : "");
  std::printf("samples/s %10.1f\n", r.samples_per_s);
  std::printf("peak      %10.1f   MB (%s)\n", r.peak_memory_mb,
              r.device.rfind("cuda", 0) == 0 ? "the caching allocator's reserved memory" : "the process's resident set");
  std::printf("precision %s\nhardware  %s\n", precision_name(r.precision).c_str(), r.hardware.c_str());
  nlohmann::ordered_json json;
  json["model"] = config.model.type();
  json["precision"] = precision_name(r.precision);
  json["channels_last"] = config.train.channels_last;
  json["cuda_graph"] = r.graph;
  json["activation_checkpointing"] = config.activation_checkpointing.any();
  json["batch_size"] = r.batch_size;
  json["ms_per_step"] = r.ms_per_step;
  json["samples_per_s"] = r.samples_per_s;
  json["peak_memory_mb"] = r.peak_memory_mb;
  json["device"] = r.device;
  json["hardware"] = r.hardware;
  std::printf("%s\n", json.dump().c_str());
  return 0;
}

int eval(const Args& args) {
  const std::filesystem::path checkpoint = stoker::resolve_checkpoint(args.checkpoint);
  std::vector<std::string> notes;
  const stoker::Config config = args.config.empty() ? saved_config(checkpoint, args.overrides, notes)
                                                    : stoker::load_config(args.config, args.overrides, &notes);
  if (print_config(args, config, notes)) return 0;
  for (const std::string& note : notes) stoker::logger().info("{}", note);
  const stoker::CheckpointEvaluation e = stoker::evaluate_checkpoint(config, checkpoint);
  std::printf("checkpoint %s (%lld epoch(s) done, step %lld)\n", checkpoint.c_str(), (long long)e.state.epoch,
              (long long)e.state.step);
  std::printf("test       loss %.4f, top-1 %s, top-5 %s (%lld samples%s)\n", e.model.loss,
              percent(e.model.top1).c_str(), percent(e.model.top5).c_str(), (long long)e.model.samples,
              e.model.excluded > 0
                  ? fmt::format("; {} unreadable sample(s) left out", e.model.excluded).c_str()
                  : "");
  nlohmann::ordered_json json;
  json["checkpoint"] = checkpoint.string();
  json["samples"] = e.model.samples;
  json["excluded"] = e.model.excluded;
  json["test_loss"] = e.model.loss;
  json["test_top1"] = e.model.top1;
  json["test_top5"] = e.model.top5;
  if (e.ema) {
    std::printf("EMA test   loss %.4f, top-1 %s, top-5 %s\n", e.ema->loss, percent(e.ema->top1).c_str(),
                percent(e.ema->top5).c_str());
    json["ema_test_loss"] = e.ema->loss;
    json["ema_test_top1"] = e.ema->top1;
    json["ema_test_top5"] = e.ema->top5;
  }
  std::printf("%s\n", json.dump().c_str());
  return 0;
}

int predict(const Args& args) {
  stoker::PredictRequest request;
  request.checkpoint = stoker::resolve_checkpoint(args.checkpoint);
  stoker::logger().info("predict: checkpoint {}{}", request.checkpoint.string(), args.ema ? " (its EMA weights)" : "");
  if (!args.config.empty()) request.config_file = args.config;
  request.overrides = args.overrides;
  request.images.assign(args.images.begin(), args.images.end());
  request.top_k = args.top;
  request.use_ema = args.ema;
  for (const stoker::ImagePrediction& p : stoker::predict_images(request)) {
    std::vector<std::string> classes;
    for (size_t i = 0; i < p.classes.size(); ++i) {
      classes.push_back(fmt::format("{} ({:.4f})", p.names[i], p.probabilities[i]));
    }
    std::printf("%s: %s\n", p.image.c_str(), fmt::format("{}", fmt::join(classes, ", ")).c_str());
  }
  return 0;
}

namespace {

stoker::TuneResult doctor_tune(const Args& args, const stoker::Config& config, int64_t memory_budget) {
  stoker::TuneOptions tune;
  tune.budget_seconds = args.tune_budget;
  tune.memory_budget_bytes = memory_budget;
  const stoker::TuneResult r = stoker::tune(config, tune);
  std::printf("\n%s", stoker::format_tune(r).c_str());
  nlohmann::ordered_json json;
  json["tune_start_samples_per_s"] = r.start.samples_per_s;
  json["tune_best_samples_per_s"] = r.best.samples_per_s;
  json["tune_ceiling_samples_per_s"] = r.ceiling_samples_per_s;
  json["workers"] = r.best.workers;
  json["prefetch_factor"] = r.best.prefetch_factor;
  json["device_prefetch"] = r.best.device_prefetch;
  json["cache"] = std::string(stoker::data_cache_name(r.best.cache));
  json["seconds"] = r.seconds;
  std::printf("%s\n", json.dump().c_str());
  std::fflush(stdout);
  return r;
}

stoker::BatchChoice doctor_batch(const Args& args, const stoker::Config& config, int64_t memory_budget,
                                 stoker::BatchSweepResult& sweep) {
  stoker::BatchSweepOptions o;
  o.max_batch = args.max_batch;
  o.memory_budget_bytes = memory_budget;
  sweep = stoker::batch_sweep(config, o);
  const stoker::BatchChoice choice = stoker::choose_batch(config, sweep.trials, args.knee);
  std::printf("\n%s", stoker::format_batch_sweep(config, sweep, choice).c_str());
  std::fflush(stdout);
  return choice;
}

std::string today_utc() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char date[16];
  std::strftime(date, sizeof date, "%Y-%m-%d", &tm);
  return date;
}

// --write FILE / --in-place: the tune's winner and the batch's knee written into the recipe's text,
// with a comment saying when and what measured them.
void write_tuned(const Args& args, const stoker::LadderContext& machine, const stoker::TuneResult* tune,
                 const stoker::BatchChoice* batch, const stoker::BatchSweepResult* sweep) {
  const std::filesystem::path out = args.in_place ? std::filesystem::path(args.config) : std::filesystem::path(args.write_to);
  std::vector<std::string> measured;
  if (tune != nullptr) {
    measured.push_back(fmt::format("tune {:.1f} -> {:.1f} samples/s ({:.2f} of the device-cached ceiling)",
                                   tune->start.samples_per_s, tune->best.samples_per_s,
                                   tune->best.samples_per_s / std::max(1e-9, tune->ceiling_samples_per_s)));
  }
  if (batch != nullptr && batch->batch_size > 0) {
    for (const stoker::BatchTrial& t : sweep->trials) {
      if (t.batch_size == batch->batch_size) {
        measured.push_back(fmt::format("batch knee {} ({:.1f} samples/s, --knee {:g})", t.batch_size, t.samples_per_s, args.knee));
      }
    }
  }
  const std::string comment =
      fmt::format("trainer doctor{}{}, {} UTC, measured on {} ({} cores): {}", tune ? " --tune" : "", batch ? " --batch" : "",
                  today_utc(), machine.device, machine.cores, fmt::join(measured, "; "));
  const stoker::RecipeEdit edit =
      stoker::write_recipe(args.config, out, stoker::tuned_values(tune, batch, machine.device != "cpu"), comment);
  std::printf("\nwrote %s%s\n", out.c_str(), edit.changes.empty() ? " (no value changed; the comment says when it was measured)" : ":");
  for (const std::string& change : edit.changes) std::printf("  %s\n", change.c_str());
}

}  // namespace

int doctor(const Args& args) {
  const std::optional<stoker::Config> loaded = load_or_print(args);
  if (!loaded) return 0;
  const stoker::Config& config = *loaded;
  STOKER_CHECK(args.write_to.empty() || !args.in_place, "doctor: give --write FILE or --in-place, not both");
  STOKER_CHECK((args.write_to.empty() && !args.in_place) || args.tune || args.batch,
               "doctor: --write and --in-place write what --tune or --batch finds; add one of them");
  const int64_t budget = args.memory_budget_mb * 1000 * 1000;
  stoker::DoctorOptions options;
  options.steps = args.doctor_steps;
  options.memory_budget_bytes = budget;
  options.trace_path = args.trace;
  stoker::logger().info("doctor: {}{}", args.config,
                        args.overrides.empty() ? "" : fmt::format(" with --set {}", fmt::join(args.overrides, " --set ")));
  const stoker::LadderResult ladder = stoker::run_ladder(config, options);
  std::fputs(stoker::format_ladder(ladder).c_str(), stdout);
  std::printf("%s\n", stoker::ladder_json(ladder).c_str());
  std::fflush(stdout);
  if (!args.save_to.empty()) {
    const std::filesystem::path saved = stoker::save_ladder(ladder, args.save_to);
    stoker::logger().info("doctor: saved the ladder to {}; `trainer report {}` shows it", saved.string(), args.save_to);
  }
  std::optional<stoker::TuneResult> tuned;
  if (args.tune) tuned = doctor_tune(args, config, budget);
  std::optional<stoker::BatchChoice> knee;
  stoker::BatchSweepResult sweep;
  if (args.batch) knee = doctor_batch(args, config, budget, sweep);
  if (!args.write_to.empty() || args.in_place) {
    write_tuned(args, ladder.context, tuned ? &*tuned : nullptr, knee ? &*knee : nullptr, &sweep);
  }
  if (args.check) {
    // Last, so that a CI log shows the verdict at its end; the diagnosis is above it.
    const stoker::ContractVerdict verdict = stoker::check_contract(ladder.rungs, args.min_ratio);
    std::printf("\n%s\n", verdict.line.c_str());
    if (!verdict.kept) {
      std::printf("diagnosis:\n");
      for (const std::string& line : ladder.diagnosis.lines) std::printf("  %s\n", line.c_str());
      return 1;
    }
  }
  return 0;
}

int report(const Args& args) {
  stoker::ReportRequest request;
  request.run = args.run_dir;
  request.compare.assign(args.compare.begin(), args.compare.end());
  request.output = args.output_file;
  const std::filesystem::path written = stoker::write_report(request);
  std::printf("wrote %s\n", written.c_str());
  return 0;
}

int export_weights(const Args& args) {
  stoker::ExportRequest request;
  request.checkpoint = stoker::resolve_checkpoint(args.checkpoint);
  if (!args.config.empty()) request.config_file = args.config;
  request.overrides = args.overrides;
  request.format = args.format;
  request.use_ema = args.ema;
  request.output = args.output_file;
  if (!args.input_size.empty()) request.input_size = stoker::parse_input_size(args.input_size);
  if (args.opset > 0) request.opset = args.opset;
  request.dynamic_batch = args.dynamic_batch;
  request.include_normalize = args.include_normalize;
  if (!args.dtype.empty()) request.dtype = args.dtype;
  const stoker::ExportResult out = stoker::export_checkpoint(request);
  std::printf("wrote %s (%s%s of %s) and %s\n", out.model.c_str(), out.summary.c_str(),
              request.use_ema ? ", EMA weights" : "", request.checkpoint.c_str(), out.metadata.c_str());
  return 0;
}

int pack(const Args& args) {
  data::PackOptions o;
  o.from = args.pack_from;
  o.to = args.pack_to;
  o.max_side = args.max_side;
  o.quality = static_cast<int>(args.quality);
  o.shard_size_mb = args.shard_size_mb;
  o.workers = args.pack_workers;
  o.shards = args.pack_shards;
  auto& log = stoker::logger();
  // On a terminal one progress line, redrawn (\r) every 0.2 s; in a log a line every 30 s and one per shard.
  const bool tty = ::isatty(fileno(stderr)) == 1;
  double last = -1;
  std::string last_split;
  o.progress = [&log, tty](const std::string& split, const std::string& shard, int64_t done, int64_t total) {
    if (!tty) log.info("pack {}: {} written ({} of {} samples, {:.0f}%)", split, shard, done, total, 100.0 * done / total);
  };
  o.advance = [&log, tty, &last, &last_split](const data::PackProgress& p) {
    const bool end = p.done == p.total;
    if (p.split != last_split) last = -1;
    last_split = p.split;
    if (!end && last >= 0 && p.seconds - last < (tty ? 0.2 : 30.0)) return;
    last = p.seconds;
    if (tty) {
      std::fprintf(stderr, "\r\033[Kpack %s%s", data::format_pack_progress(p).c_str(), end ? "\n" : "");
    } else {
      log.info("pack {}", data::format_pack_progress(p));
    }
  };
  log.info("pack: {} -> {}{}, {} workers", o.from, o.to,
           o.max_side > 0 ? fmt::format(" (longer side at most {} px, JPEG quality {})", o.max_side, o.quality) : "",
           o.workers > 0 ? o.workers : std::max<int64_t>(1, std::thread::hardware_concurrency()));
  const std::vector<data::PackedSplit> splits = data::pack_dataset(o);
  for (const data::PackedSplit& s : splits) {
    log.info("{}: {} samples in {} shards, {:.1f} MB", s.name, s.samples, s.shards.size(), s.bytes / 1e6);
  }
  log.info("wrote {}/_info.json, which names the shards: train from them with data.type: webdataset and "
           "data.root: {} (docs/shards.md)", o.to, o.to);
  return 0;
}

}  // namespace stoker::apps
