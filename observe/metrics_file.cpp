#include "observe/metrics_file.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.h"

namespace stoker {
namespace {

using Json = nlohmann::ordered_json;  // keys in the order written

void add_telemetry(Json& line, const std::optional<GpuSample>& sample) {
  for (const Scalar& s : telemetry_scalars(sample)) {
    std::string key = s.tag;  // gpu/power_w -> gpu_power_w
    key[key.find('/')] = '_';
    line[key] = s.value;
  }
}

}  // namespace

MetricsRecord parse_metrics_line(const std::string& line, const std::string& where) {
  Json json;
  try {
    json = Json::parse(line);
  } catch (const nlohmann::json::parse_error& e) {
    STOKER_FAIL("{}: not a JSON object: {}", where, e.what());
  }
  STOKER_CHECK(json.is_object(), "{}: expected a JSON object, got '{}'", where, line);
  MetricsRecord record;
  for (const auto& [key, value] : json.items()) {
    if (value.is_string()) {
      record.strings[key] = value.get<std::string>();
    } else if (value.is_boolean()) {
      record.numbers[key] = value.get<bool>() ? 1 : 0;
    } else if (value.is_number()) {
      record.numbers[key] = value.get<double>();
    } else if (value.is_null()) {
      record.numbers[key] = std::numeric_limits<double>::quiet_NaN();  // written for a non-finite value
    } else {
      STOKER_FAIL("{}: the value of \"{}\" is {}; expected a number, string, boolean or null", where, key,
                  value.type_name());
    }
  }
  return record;
}

std::vector<MetricsRecord> read_metrics_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  STOKER_CHECK(in.good(), "cannot read {}", path.string());
  std::vector<MetricsRecord> out;
  int line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    out.push_back(parse_metrics_line(line, fmt::format("{}:{}", path.string(), line_number)));
  }
  return out;
}

std::string metrics_line(const StepRecord& r) {
  Json line;
  line["kind"] = "step";
  line["epoch"] = r.epoch;
  line["step"] = r.step;
  line["loss"] = r.loss;
  line["lr"] = r.lr;
  line["samples_per_s"] = r.samples_per_s;
  line["data_wait"] = r.data_wait;
  if (r.gpu_idle) line["gpu_idle"] = *r.gpu_idle;
  if (r.tflops) line["tflops"] = *r.tflops;
  if (r.mfu) line["mfu"] = *r.mfu;
  if (r.loss_scale) line["loss_scale"] = *r.loss_scale;
  if (r.skipped_steps) line["skipped_steps"] = *r.skipped_steps;
  add_telemetry(line, r.telemetry);
  return line.dump();  // NaN and infinities as null
}

std::string metrics_line(const EpochRecord& e) {
  const EpochResult& r = e.result;
  Json line;
  line["kind"] = "epoch";
  line["epoch"] = r.epoch;
  line["step"] = e.step;
  line["train_loss"] = r.train_loss;
  if (std::isfinite(r.train_top1)) line["train_top1"] = r.train_top1;
  line["test_loss"] = r.test.loss;
  line["test_top1"] = r.test.top1;
  line["test_top5"] = r.test.top5;
  line["test_samples"] = r.test.samples;
  line["test_excluded"] = r.test.excluded;
  line["epoch_seconds"] = r.seconds;
  line["samples_per_s"] = r.samples_per_s;
  line["data_wait"] = r.data_wait;
  line["data_read_s"] = r.stages.read;
  line["data_decode_s"] = r.stages.decode;
  line["data_transform_s"] = r.stages.transform;
  line["data_copy_s"] = r.stages.copy;
  line["data_batch_ops_s"] = r.stages.batch_ops;
  line["bad_samples"] = r.stages.bad_samples;
  line["loss_scale"] = r.loss_scale;
  line["skipped_steps"] = r.skipped_steps;
  line["nonfinite_skips"] = r.nonfinite_skips;
  if (e.tflops) line["tflops"] = *e.tflops;
  if (e.mfu) line["mfu"] = *e.mfu;
  if (r.ema_test.samples > 0) {
    line["ema_test_loss"] = r.ema_test.loss;
    line["ema_test_top1"] = r.ema_test.top1;
    line["ema_test_top5"] = r.ema_test.top5;
  }
  return line.dump();
}

MetricsFileSink::MetricsFileSink(const std::filesystem::path& path) : path_(path), out_(path, std::ios::app) {
  STOKER_CHECK(out_.good(), "cannot open {} for writing metrics; check that its folder is writable", path.string());
}

void MetricsFileSink::write(const std::string& line) {
  out_ << line << '\n';
  out_.flush();
  STOKER_CHECK(out_.good(), "writing metrics to {} failed; is the disk full?", path_.string());
}

void MetricsFileSink::step(const StepRecord& record) { write(metrics_line(record)); }
void MetricsFileSink::epoch(const EpochRecord& record) { write(metrics_line(record)); }

}  // namespace stoker
