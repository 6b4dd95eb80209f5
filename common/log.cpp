#include "common/log.h"

#include <algorithm>
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

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

}  // namespace stoker
