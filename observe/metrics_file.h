// metrics.jsonl: one JSON object per line, written by MetricsFileSink as a run goes and read back by
// read_metrics_file (`trainer report`, tests). One module does both, with one JSON library
// (nlohmann-json), so what is written is what the reader accepts: a value that is not finite (a
// diverged run's loss) is written as null and read back as NaN.
//
//   step lines:  {"kind":"step","epoch":0,"step":50,"loss":1.24,"lr":0.036,"samples_per_s":1646,
//                 "data_wait":0.006[,"gpu_idle":..][,"tflops":..,"mfu":..][,"loss_scale":..,
//                 "skipped_steps":..][,"gpu_utilization":.. and the other gpu_* fields]}
//   epoch lines: {"kind":"epoch","epoch":0,"step":468,"train_loss":..,"test_loss":..,"test_top1":..,
//                 "test_top5":..,"test_samples":..,"test_excluded":..,"epoch_seconds":..,
//                 "samples_per_s":..,"data_wait":..,"data_read_s":..,"data_decode_s":..,
//                 "data_transform_s":..,"data_copy_s":..,"bad_samples":..,"loss_scale":..,
//                 "skipped_steps":..,"nonfinite_skips":..[,"tflops":..,"mfu":..][,"ema_test_loss":..,
//                 "ema_test_top1":..,"ema_test_top5":..]}
#pragma once

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "observe/metrics.h"

namespace stoker {

// One JSON object of flat values: numbers (booleans as 1/0, null as NaN) and strings.
struct MetricsRecord {
  std::map<std::string, double> numbers;
  std::map<std::string, std::string> strings;
};

// Parses one line (or any flat JSON object: environment.json, doctor.json); `where` (file:line) names
// it in errors, which say what is wrong.
MetricsRecord parse_metrics_line(const std::string& line, const std::string& where);
// Every non-empty line of `path`; a missing file is an error naming it.
std::vector<MetricsRecord> read_metrics_file(const std::filesystem::path& path);

// The metrics.jsonl line of a record, as written.
std::string metrics_line(const StepRecord& record);
std::string metrics_line(const EpochRecord& record);

// Appends a line per record to `path` (a resumed run continues its file), flushing each, so that a
// crash loses at most the line being written.
class MetricsFileSink : public MetricsSink {
 public:
  explicit MetricsFileSink(const std::filesystem::path& path);
  void step(const StepRecord& record) override;
  void epoch(const EpochRecord& record) override;

 private:
  void write(const std::string& line);
  std::filesystem::path path_;
  std::ofstream out_;
};

}  // namespace stoker
