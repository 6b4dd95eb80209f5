// Logging, metrics and progress output of a run.
// - logger(): the "stoker" spdlog logger; console at info, and once a run directory exists, a log
//   file there at debug.
// - JsonLine / MetricsWriter: one JSON object per line in metrics.jsonl, flushed line by line.
// - Progress: a live bar on a terminal, plain periodic lines otherwise (CI, files).
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <spdlog/logger.h>

namespace stoker {

// The process-wide Stoker logger (console only until attach_log_file is called).
spdlog::logger& logger();
// Adds a debug-level file sink at `path` to logger(); later calls replace the file.
void attach_log_file(const std::filesystem::path& path);

// Builds one flat JSON object: JsonLine().add("loss", 0.5).add("kind", "step").str().
class JsonLine {
 public:
  JsonLine& add(const std::string& key, double value);
  JsonLine& add(const std::string& key, int64_t value);
  JsonLine& add(const std::string& key, const std::string& value);
  JsonLine& add(const std::string& key, bool value);
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void key(const std::string& k);
  std::string body_;
};

// Appends JSON lines to a file, flushing each so a crash loses at most the line being written.
class MetricsWriter {
 public:
  explicit MetricsWriter(const std::filesystem::path& path);
  void write(const JsonLine& line);

 private:
  std::filesystem::path path_;
  std::ofstream out_;
};

struct ProgressUpdate {
  int64_t epoch = 0, epochs = 0;  // 1-based epoch of `epochs`
  int64_t step = 0, steps = 0;    // 1-based step within the epoch of `steps`
  double loss = 0, lr = 0, samples_per_s = 0, data_wait = 0, eta_s = 0;
  double gpu_idle = -1;  // share of GPU time idle between steps (CUDA); < 0: not measured
};

class Progress {
 public:
  // `live`: redraw one line in place (for terminals); otherwise print a line every `every` steps.
  Progress(bool live, int64_t every, std::FILE* out = stdout);
  void update(const ProgressUpdate& u);
  // Whether update() for this step would print anything (so callers can skip reading values
  // that cost a device synchronisation).
  bool due(int64_t step, int64_t steps) const;
  // Ends the current line (a live bar stays visible) before other output follows.
  void finish_line();

 private:
  bool live_;
  int64_t every_;
  std::FILE* out_;
  bool open_line_ = false;
  double last_draw_ = -1;
};

// "1h02m", "4m05s", "12s".
std::string format_duration(double seconds);

}  // namespace stoker
