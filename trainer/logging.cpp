#include "trainer/logging.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "common/error.h"

namespace stoker {
namespace {

struct LoggerHolder {
  std::shared_ptr<spdlog::sinks::sink> console;
  std::shared_ptr<spdlog::sinks::sink> file;  // the current run's log file, if any
  std::shared_ptr<spdlog::logger> logger;     // one object for the whole process
  LoggerHolder() {
    console = std::make_shared<spdlog::sinks::stdout_color_sink_mt>();
    console->set_level(spdlog::level::info);
    console->set_pattern("[%H:%M:%S] %^%l%$ %v");
    logger = std::make_shared<spdlog::logger>("stoker", console);
    logger->set_level(spdlog::level::debug);
    logger->flush_on(spdlog::level::info);
  }
};

LoggerHolder& holder() {
  static LoggerHolder h;
  return h;
}

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

std::string escape_json(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\u{:04x}", c);
        else out += c;
    }
  }
  return out;
}

}  // namespace

spdlog::logger& logger() { return *holder().logger; }

void attach_log_file(const std::filesystem::path& path) {
  std::shared_ptr<spdlog::sinks::sink> file;
  try {
    file = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path.string(), false);
  } catch (const spdlog::spdlog_ex& e) {
    STOKER_FAIL("cannot open the log file {}: {}", path.string(), e.what());
  }
  file->set_level(spdlog::level::debug);
  file->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
  // The logger object stays the same (callers may hold references to it); only its sinks change.
  auto& h = holder();
  auto& sinks = h.logger->sinks();
  if (h.file) sinks.erase(std::remove(sinks.begin(), sinks.end(), h.file), sinks.end());
  h.file = file;
  sinks.push_back(file);
}

void JsonLine::key(const std::string& k) {
  if (!body_.empty()) body_ += ",";
  body_ += "\"" + escape_json(k) + "\":";
}

JsonLine& JsonLine::add(const std::string& k, double value) {
  key(k);
  body_ += std::isfinite(value) ? fmt::format("{}", value) : "null";
  return *this;
}

JsonLine& JsonLine::add(const std::string& k, int64_t value) {
  key(k);
  body_ += std::to_string(value);
  return *this;
}

JsonLine& JsonLine::add(const std::string& k, const std::string& value) {
  key(k);
  body_ += "\"" + escape_json(value) + "\"";
  return *this;
}

JsonLine& JsonLine::add(const std::string& k, bool value) {
  key(k);
  body_ += value ? "true" : "false";
  return *this;
}

MetricsWriter::MetricsWriter(const std::filesystem::path& path)
    : path_(path), out_(path, std::ios::app) {
  STOKER_CHECK(out_.good(), "cannot open {} for writing metrics", path.string());
}

void MetricsWriter::write(const JsonLine& line) {
  out_ << line.str() << '\n';
  out_.flush();
  STOKER_CHECK(out_.good(), "writing metrics to {} failed; is the disk full?", path_.string());
}

Progress::Progress(bool live, int64_t every, std::FILE* out) : live_(live), every_(every), out_(out) {}

bool Progress::due(int64_t step, int64_t steps) const {
  if (!live_) return step % every_ == 0 || step == steps;
  return step == steps || last_draw_ < 0 || now_s() - last_draw_ >= 0.1;
}

void Progress::update(const ProgressUpdate& u) {
  const std::string idle = u.gpu_idle >= 0 ? fmt::format("  gpu_idle {:.1f}%", 100.0 * u.gpu_idle) : "";
  const std::string stats =
      fmt::format("loss {:.4f}  lr {:.4g}  {:.0f} samples/s  data {:.1f}%{}  ETA {}", u.loss, u.lr,
                  u.samples_per_s, 100.0 * u.data_wait, idle, format_duration(u.eta_s));
  if (!live_) {
    if (u.step % every_ != 0 && u.step != u.steps) return;
    std::fprintf(out_, "epoch %lld/%lld  step %lld/%lld  %s\n", (long long)u.epoch,
                 (long long)u.epochs, (long long)u.step, (long long)u.steps, stats.c_str());
    std::fflush(out_);
    return;
  }
  const double t = now_s();
  if (u.step != u.steps && last_draw_ >= 0 && t - last_draw_ < 0.1) return;  // <= 10 redraws/s
  last_draw_ = t;
  constexpr int kWidth = 24;
  const int filled = static_cast<int>(kWidth * u.step / std::max<int64_t>(1, u.steps));
  const std::string bar = std::string(filled, '#') + std::string(kWidth - filled, '-');
  std::fprintf(out_, "\r\033[Kepoch %lld/%lld [%s] %lld/%lld  %s", (long long)u.epoch,
               (long long)u.epochs, bar.c_str(), (long long)u.step, (long long)u.steps,
               stats.c_str());
  std::fflush(out_);
  open_line_ = true;
}

void Progress::finish_line() {
  if (open_line_) {
    std::fputc('\n', out_);
    std::fflush(out_);
    open_line_ = false;
  }
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

}  // namespace stoker
