// The process-wide Stoker logger: "stoker" on spdlog, console at info; once a run directory exists,
// also a log file there at debug (attach_log_file). Every layer logs through it; what a run records
// beyond log lines (metrics, progress, TensorBoard) is observe/'s.
#pragma once

#include <filesystem>
#include <string>

#include <spdlog/logger.h>

namespace stoker {

// The process-wide Stoker logger (console only until attach_log_file is called).
spdlog::logger& logger();
// Adds a debug-level file sink at `path` to logger(); later calls replace the file.
void attach_log_file(const std::filesystem::path& path);

// "1h02m", "4m05s", "12s".
std::string format_duration(double seconds);

}  // namespace stoker
