// The doctor's words: the diagnosis computed from the ladder's numbers, the table and the JSON line.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/atomic_write.h"
#include "common/error.h"
#include "doctor/doctor.h"
#include "common/log.h"
#include "doctor/reads.h"

namespace stoker {
namespace fs = std::filesystem;
namespace {

constexpr double kInputBoundRatio = 0.9;  // full below this share of the ceiling: input-bound
constexpr double kHeadroom = 0.9;         // workers must build a batch in 90% of a step's compute
constexpr double kWaitExplains = 0.5;     // on the CPU: the wait must explain half the loss to be the input's

const RungResult* find_rung(const std::vector<RungResult>& rungs, const std::string& name) {
  for (const RungResult& r : rungs) {
    if (r.name == name && r.measured) return &r;
  }
  return nullptr;
}

std::string gigabytes(double bytes) { return fmt::format("{:.1f} GB", bytes / 1e9); }
std::string ms(double seconds) { return fmt::format("{:.1f} ms", 1e3 * seconds); }

// What the step pays at `rung` that it did not pay at the rung above, in words, with its cost per
// sample as the rung measured it.
std::string stage_cost(const RungResult& rung) {
  const data::StageTimes& t = rung.stages;
  if (rung.name == "host-cached") {
    return fmt::format("copying batches to the device and converting them costs {:.0f} us/sample", rung.us_per_sample(t.copy));
  }
  if (rung.name == "decoded-cached") {
    return fmt::format("transforms and collation cost {:.0f} us/sample", rung.us_per_sample(t.transform));
  }
  if (rung.name == "raw-cached") {
    return fmt::format("decoding costs {:.0f} us/sample", rung.us_per_sample(t.decode));
  }
  return fmt::format("reading the samples costs {:.0f} us/sample", rung.us_per_sample(t.read));
}

// The largest drop in samples/s from one measured rung to the next: the rung it drops to, and by how much.
// A drop counts only where the step waited longer for its input than at the rung above (by 3 points
// of the wall time or more): a rung that is slower while its input stays as hidden as before was
// slowed by something else on the machine, not by the stage it adds. Without any such rung (a copy
// that waits outside next()), the plain largest drop.
struct Loss {
  const RungResult* rung = nullptr;
  double samples_per_s = 0;
};
Loss largest_loss(const std::vector<RungResult>& rungs, bool only_where_input_waited) {
  constexpr double kWaitGrowth = 0.03;
  const RungResult* previous = nullptr;
  Loss worst;
  for (const RungResult& r : rungs) {
    if (!r.measured) continue;
    const bool counts = !only_where_input_waited || (previous != nullptr && r.wait_share - previous->wait_share >= kWaitGrowth);
    if (previous != nullptr && counts && previous->samples_per_s - r.samples_per_s > worst.samples_per_s) {
      worst = {&r, previous->samples_per_s - r.samples_per_s};
    }
    previous = &r;
  }
  return worst;
}
Loss largest_loss(const std::vector<RungResult>& rungs) {
  const Loss waited = largest_loss(rungs, true);
  return waited.rung != nullptr ? waited : largest_loss(rungs, false);
}

// The remedy when the copy to the device is what loses most.
void copy_remedy(const LadderContext& c, Diagnosis& d) {
  d.lines.push_back(fmt::format(
      "remedy: keep data.pin_memory on and data.device_prefetch at 2 or more so that copies overlap compute; "
      "the batches cross the bus as uint8 already ({} is the device)",
      c.device));
}

// Samples/s predicted with `workers` loader threads on the CPU, where they share the cores with the
// model: with run.threads 0 each worker takes a core from libtorch (compute slows by the ratio of
// threads); building a batch takes per_step / workers. 0 workers: the training thread does both.
double cpu_prediction(const LadderContext& c, double compute, double per_step, int64_t workers) {
  if (workers == 0) return static_cast<double>(c.batch_size) / (compute + per_step);
  const double threads = c.threads_follow_workers ? static_cast<double>(std::max<int64_t>(1, c.cores - workers))
                                                  : static_cast<double>(c.torch_threads);
  const double step = std::max(compute * static_cast<double>(c.torch_threads) / threads, per_step / workers);
  return static_cast<double>(c.batch_size) / step;
}

// The data.workers remedy: on a GPU the count that builds a batch within 90% of a step; on the CPU
// the count whose predicted samples/s is highest, cores shared.
void suggest_workers(const LadderContext& c, const RungResult& ceiling, const RungResult& full, double per_step,
                     Diagnosis& d) {
  const double compute = 1.0 / ceiling.steps_per_s;
  const std::string cores = fmt::format("this machine has {} cores", c.cores);
  if (c.device != "cpu") {
    const auto needed = static_cast<int64_t>(std::ceil(per_step / (kHeadroom * compute)));
    if (needed > c.cores) {
      d.lines.push_back(fmt::format("workers alone cannot keep up: {} would be needed and {}", needed, cores));
      return;
    }
    d.suggested_workers = std::max(needed, c.workers + 1);
    d.lines.push_back(fmt::format("remedy: raise data.workers to >= {} ({}); predicted: about {:.0f} samples/s, the "
                                  "device-cached ceiling ({:.2f}x the full rung now)",
                                  d.suggested_workers, cores, ceiling.samples_per_s,
                                  ceiling.samples_per_s / std::max(1e-9, full.samples_per_s)));
    return;
  }
  int64_t best = 0;
  double best_rate = full.samples_per_s;
  for (int64_t w = 1; w < std::max<int64_t>(2, c.cores); ++w) {
    const double rate = std::min(cpu_prediction(c, compute, per_step, w), ceiling.samples_per_s);
    if (rate > best_rate * 1.05) {
      best = w;
      best_rate = rate;
    }
  }
  if (best == 0) {
    d.lines.push_back(fmt::format(
        "more data.workers would not help on this CPU ({}): each takes a core from the model's {} thread(s), "
        "and the step slows by more than the batches arrive sooner",
        cores, c.torch_threads));
    return;
  }
  d.suggested_workers = std::max(best, c.workers + 1);
  d.lines.push_back(fmt::format("remedy: raise data.workers to >= {} ({}); predicted: about {:.0f} samples/s "
                                "({:.2f}x the full rung now), the model keeping {} of the cores",
                                d.suggested_workers, cores, best_rate, best_rate / std::max(1e-9, full.samples_per_s),
                                c.threads_follow_workers ? std::max<int64_t>(1, c.cores - best) : c.torch_threads));
}

// The data.cache remedy, predicted by the rung that caches the same stage: raw when storage reads
// lose most, decoded when decoding does.
void suggest_cache(const LadderContext& c, const std::vector<RungResult>& rungs, const RungResult& worst,
                   const RungResult& full, Diagnosis& d) {
  const bool raw = worst.name == "full";
  if (!raw && worst.name != "raw-cached") return;
  const RungResult* cached = find_rung(rungs, raw ? "raw-cached" : "decoded-cached");
  const double bytes = raw ? c.full_raw_cache_bytes : c.full_decoded_cache_bytes;
  if (cached == nullptr || cached->samples_per_s < 1.05 * full.samples_per_s || bytes <= 0) return;
  const std::string level = raw ? "raw" : "decoded";
  if (bytes < 0.8 * c.available_bytes) {
    d.lines.push_back(fmt::format(
        "remedy: data.cache: {} keeps the samples in memory after their first read (needs {}, {} free); the {} rung "
        "measured {:.0f} samples/s ({:.2f}x the full rung now)",
        level, gigabytes(bytes), gigabytes(c.available_bytes), cached->name, cached->samples_per_s,
        cached->samples_per_s / std::max(1e-9, full.samples_per_s)));
  } else {
    d.lines.push_back(fmt::format("data.cache: {} would reach the {} rung's {:.0f} samples/s but needs {}, and only {} "
                                  "is free; reduce the per-sample cost (smaller stored images, cheaper transforms) or "
                                  "use a machine with more cores",
                                  level, cached->name, cached->samples_per_s, gigabytes(bytes),
                                  gigabytes(c.available_bytes)));
  }
}

// Workers and caches for a pipeline whose per-sample CPU cost outruns the step.
void worker_remedy(const LadderContext& c, const std::vector<RungResult>& rungs, const RungResult& worst,
                   const RungResult& ceiling, const RungResult& full, Diagnosis& d) {
  const data::StageTimes& t = full.stages;
  const double cost = (t.read + t.decode + t.transform) / std::max<double>(1.0, static_cast<double>(full.samples));
  const double per_step = cost * static_cast<double>(c.batch_size);
  const int64_t workers = std::max<int64_t>(1, c.workers);
  d.lines.push_back(fmt::format(
      "the input pipeline costs {:.0f} us of CPU per sample (read + decode + transform); at batch {} over {} "
      "worker(s) that is {} per step against {} of compute",
      1e6 * cost, c.batch_size, c.workers == 0 ? "0 (the training thread itself)" : std::to_string(workers),
      ms(per_step / static_cast<double>(workers)), ms(1.0 / ceiling.steps_per_s)));
  suggest_workers(c, ceiling, full, per_step, d);
  suggest_cache(c, rungs, worst, full, d);
  if (c.device == "cpu" && d.suggested_workers > 0) {
    d.lines.push_back("`trainer doctor --tune` measures the worker settings instead of predicting them");
  }
}


std::string variant_name(const StepVariant& v) {
  return fmt::format("{}{}", v.precision, v.channels_last ? " channels-last" : "");
}

// The remedy of a compute-bound recipe: the fastest precision and layout timed here (when the doctor
// timed them) as --set flags with the gain it measured, then the batch size and graphs.
void step_remedy(const LadderContext& c, Diagnosis& d) {
  const StepVariant* current = nullptr;
  const StepVariant* fastest = nullptr;
  for (const StepVariant& v : c.step_variants) {
    if (!v.measured) continue;
    if (v.precision == c.precision && v.channels_last == c.channels_last) current = &v;
    if (fastest == nullptr || v.ms < fastest->ms) fastest = &v;
  }
  if (current != nullptr && fastest != nullptr && fastest->ms < current->ms / 1.05) {
    std::string flags;
    if (fastest->precision != c.precision) flags += fmt::format(" --set train.precision={}", fastest->precision);
    if (fastest->channels_last != c.channels_last) {
      flags += fmt::format(" --set train.channels_last={}", fastest->channels_last ? "true" : "false");
    }
    d.lines.push_back(fmt::format("remedy:{}: a training step takes {:.1f} ms in {} against {:.1f} ms as configured "
                                  "({}), predicted {:.2f}x the samples/s",
                                  flags, fastest->ms, variant_name(*fastest), current->ms, variant_name(*current),
                                  current->ms / fastest->ms));
  } else if (current != nullptr) {
    d.lines.push_back(fmt::format("the recipe's precision and layout ({}, {:.1f} ms per step) are the fastest of those "
                                  "timed here",
                                  variant_name(*current), current->ms));
  }
  std::string rest = "remedy: speed up the step itself: a batch size that uses the device (`trainer doctor --batch`)";
  if (c.device != "cpu") rest += ", train.cuda_graph for small models";
  d.lines.push_back(rest);
}

// The diagnosis of the rungs' numbers alone (diagnose() adds the note on the machine's steadiness).
Diagnosis diagnose_numbers(const LadderContext& c, const std::vector<RungResult>& rungs) {
  Diagnosis d;
  const RungResult* ceiling = find_rung(rungs, "device-cached");
  const RungResult* full = find_rung(rungs, "full");
  if (ceiling == nullptr || full == nullptr || ceiling->samples_per_s <= 0) {
    d.lines.push_back("not diagnosed: the device-cached and full rungs are both needed");
    return d;
  }
  const double ratio = full->samples_per_s / ceiling->samples_per_s;
  const bool slower = ratio < kInputBoundRatio;
  // On the CPU the input is built inside next() (no workers) or by threads the step waits for there:
  // input that slows the step shows as waiting, about as much as it slows it. A full rung slower than
  // the ceiling whose step waited for less than half of the difference was slowed by something that
  // takes cores from the step (the loader's own workers, another process), not by waiting for data.
  const double waited = full->wait_share - ceiling->wait_share;
  const bool not_waiting = c.device == "cpu" && waited < kWaitExplains * (1 - ratio);
  d.input_bound = slower && !not_waiting;
  if (slower && not_waiting) {
    d.lines.push_back(fmt::format(
        "compute-bound, slowed: the full pipeline trains {:.0f} samples/s, {:.2f} of the {:.0f} samples/s of "
        "device-cached batches, but the step waited for its input only {:.0f}% of the time, which explains little "
        "of that: {}",
        full->samples_per_s, ratio, ceiling->samples_per_s, 100 * full->wait_share,
        c.workers > 0 ? fmt::format("the {} loader worker(s) share the {} cores with the model; `trainer doctor --tune` "
                                    "measures fewer (0: the step gets every core)",
                                    c.workers, c.cores)
                      : std::string("something else used this machine's cores meanwhile; run the doctor on an idle "
                                    "machine")));
    step_remedy(c, d);
    return d;
  }
  if (!d.input_bound) {
    d.lines.push_back(fmt::format(
        "compute-bound: the full pipeline trains {:.0f} samples/s, {:.2f} of the {:.0f} samples/s of "
        "device-cached batches; the input keeps up (the step waited for it {:.0f}% of the time)",
        full->samples_per_s, ratio, ceiling->samples_per_s, 100 * full->wait_share));
    step_remedy(c, d);
    return d;
  }
  d.lines.push_back(fmt::format(
      "input-bound: the full pipeline trains {:.0f} samples/s, {:.2f} of the {:.0f} samples/s of device-cached "
      "batches; the step waited for input {:.0f}% of the time",
      full->samples_per_s, ratio, ceiling->samples_per_s, 100 * full->wait_share));
  const Loss loss = largest_loss(rungs);
  if (loss.rung == nullptr) return d;
  const RungResult* worst = loss.rung;
  d.bottleneck = worst->name;
  d.lines.push_back(fmt::format("the largest loss is at the {} rung ({:.0f} samples/s less than the rung above): {}",
                                worst->name, loss.samples_per_s, stage_cost(*worst)));
  if (worst->name == "host-cached") {
    copy_remedy(c, d);
  } else {
    if (worst->name == "full") doctor::small_reads_remedy(c, *full, d);
    worker_remedy(c, rungs, *worst, *ceiling, *full, d);
  }
  return d;
}

// A line about the machine's steadiness when the ceiling moved by more than 10% during the ladder.
void steadiness_note(const LadderContext& c, Diagnosis& d) {
  if (!c.ceiling_taken_from.empty()) {
    d.lines.push_back(fmt::format(
        "note: device-cached batches measured {:.0f} samples/s at best (three times), below the {} rung, which does "
        "more work per step: something slowed them (another process on this machine); the ceiling above is the {} "
        "rung's, and the numbers are that uncertain: run the doctor on an idle machine",
        c.ceiling_measured_samples_per_s, c.ceiling_taken_from, c.ceiling_taken_from));
  }
  if (c.ceiling_spread <= 0.1) return;
  d.lines.push_back(fmt::format(
      "note: the device-cached ceiling, measured first and last, differed by {:.0f}%: something else used this "
      "machine meanwhile, and the numbers above are that uncertain; run the doctor on an idle machine",
      100 * c.ceiling_spread));
}

}  // namespace

Diagnosis diagnose(const LadderContext& c, const std::vector<RungResult>& rungs) {
  Diagnosis d = diagnose_numbers(c, rungs);
  steadiness_note(c, d);
  return d;
}

std::string format_ladder(const LadderResult& result) {
  const LadderContext& c = result.context;
  std::string out = fmt::format(
      "doctor: {} batch {}, {} worker(s), {} core(s), {} libtorch thread(s), {} training samples, precision {}\n", c.device,
      c.batch_size, c.workers, c.cores, c.torch_threads, c.dataset_samples, c.precision);
  if (!c.hardware.empty()) out += fmt::format("hardware: {}\n", c.hardware);
  out += "\n";
  out += fmt::format("{:<15} {:>8} {:>10} {:>6} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8}\n", "rung", "steps/s",
                     "samples/s", "ratio", "wait", "read", "decode", "transf", "copy", "us/sam");
  for (const RungResult& r : result.rungs) {
    if (!r.measured) {
      out += fmt::format("{:<15} {}\n", r.name, r.note);
      continue;
    }
    const data::StageTimes& t = r.stages;
    out += fmt::format("{:<15} {:>8.2f} {:>10.1f} {:>6.2f} {:>5.0f}% {:>8.1f} {:>8.1f} {:>8.1f} {:>8.1f} {:>8.1f}\n",
                       r.name, r.steps_per_s, r.samples_per_s, r.ratio, 100 * r.wait_share, r.us_per_sample(t.read),
                       r.us_per_sample(t.decode), r.us_per_sample(t.transform), r.us_per_sample(t.copy),
                       1e6 / r.samples_per_s);
  }
  out += "(stage columns: CPU microseconds per sample, summed over workers; us/sam: wall time per sample)\n";
  for (const RungResult& r : result.rungs) {
    const std::string rates = r.name == "full" && r.measured ? doctor::read_rates(r) : "";
    if (!rates.empty()) out += fmt::format("full rung {}\n", rates);
  }
  if (!c.step_variants.empty()) {
    out += fmt::format("\ntraining step by precision and layout (synthetic batch of {}):\n", c.batch_size);
    for (const StepVariant& v : c.step_variants) {
      out += fmt::format("  {:<26} {}\n", variant_name(v), v.measured ? fmt::format("{:8.1f} ms", v.ms) : v.note);
    }
  }
  for (const RungResult& r : result.rungs) {
    if (r.measured && !r.note.empty()) out += fmt::format("{}: {}\n", r.name, r.note);
  }
  if (!c.cudnn_benchmark.empty()) out += fmt::format("train.cudnn_benchmark: {}\n", c.cudnn_benchmark);
  out += "\ndiagnosis:\n";
  for (const std::string& line : result.diagnosis.lines) out += "  " + line + "\n";
  return out;
}

namespace {

nlohmann::ordered_json ladder_json_object(const LadderResult& result) {
  nlohmann::ordered_json json;
  const LadderContext& c = result.context;
  json["device"] = c.device;
  json["batch_size"] = c.batch_size;
  json["workers"] = c.workers;
  json["cores"] = c.cores;
  json["ceiling_spread"] = c.ceiling_spread;
  if (!c.ceiling_taken_from.empty()) {
    json["ceiling_taken_from"] = c.ceiling_taken_from;
    json["ceiling_measured_samples_per_s"] = c.ceiling_measured_samples_per_s;
  }
  json["precision"] = c.precision;
  json["hardware"] = c.hardware;
  for (const StepVariant& v : c.step_variants) {
    if (!v.measured) continue;
    std::string key = fmt::format("step_ms_{}{}", v.precision, v.channels_last ? "_channels_last" : "");
    std::replace(key.begin(), key.end(), '-', '_');
    json[key] = v.ms;
  }
  for (const RungResult& r : result.rungs) {
    std::string key = r.name;
    std::replace(key.begin(), key.end(), '-', '_');
    if (!r.measured) continue;
    json[key + "_steps_per_s"] = r.steps_per_s;
    json[key + "_samples_per_s"] = r.samples_per_s;
    json[key + "_ratio"] = r.ratio;
    json[key + "_wait_share"] = r.wait_share;
    if (r.name == "full" && r.seconds > 0 && r.samples > 0) {
      json["full_read_bytes_per_s"] = static_cast<double>(r.stages.read_bytes) / r.seconds;
      json["full_read_opens_per_s"] = static_cast<double>(r.stages.read_opens) / r.seconds;
      json["full_read_opens_per_sample"] = static_cast<double>(r.stages.read_opens) / static_cast<double>(r.samples);
    }
  }
  json["input_bound"] = result.diagnosis.input_bound;
  json["bottleneck"] = result.diagnosis.bottleneck;
  json["suggested_workers"] = result.diagnosis.suggested_workers;
  return json;
}

}  // namespace

std::string ladder_json(const LadderResult& result) { return ladder_json_object(result).dump(); }

fs::path save_ladder(const LadderResult& result, const fs::path& run_dir) {
  STOKER_CHECK(fs::is_directory(run_dir),
               "doctor --save-to {}: no such directory; pass a run directory (runs/<name>/<timestamp>)",
               run_dir.string());
  std::string diagnosis;
  for (const std::string& line : result.diagnosis.lines) diagnosis += (diagnosis.empty() ? "" : "\n") + line;
  const fs::path file = run_dir / "doctor.json";
  nlohmann::ordered_json json = ladder_json_object(result);
  json["diagnosis"] = diagnosis;
  write_file_atomically(file, json.dump() + "\n");
  return file;
}

}  // namespace stoker
