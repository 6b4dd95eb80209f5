#include "observe/environment.h"

#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/version.h>

#include "common/atomic_write.h"
#include "common/hardware.h"

#ifdef STOKER_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace stoker {
namespace fs = std::filesystem;

namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
  }
  return "unknown";
}

// `git describe --always --dirty` of the source tree this program was built from, if it is there.
std::string stoker_commit() {
#ifdef STOKER_SOURCE_DIR
  const std::string command =
      fmt::format("git -C '{}' describe --always --dirty 2>/dev/null", STOKER_SOURCE_DIR);
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return "unknown";
  char buffer[128] = {};
  const bool read = std::fgets(buffer, sizeof buffer, pipe) != nullptr;
  const int status = ::pclose(pipe);
  std::string out = read && status == 0 ? buffer : "";
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  if (!out.empty()) return out;
#endif
  return "unknown";
}

std::string gpu_name(torch::Device device) {
#ifdef STOKER_WITH_CUDA
  if (device.is_cuda()) return at::cuda::getDeviceProperties(device.has_index() ? device.index() : 0)->name;
#else
  (void)device;
#endif
  return "";
}

}  // namespace

std::string environment_json(torch::Device device) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char started[32];
  std::strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", &tm);
  nlohmann::ordered_json json;
  json["host"] = std::string(host);
  json["cpu"] = cpu_model();
  json["cpu_cores"] = static_cast<int64_t>(std::thread::hardware_concurrency());
  json["device"] = device.str();
  const std::string gpu = gpu_name(device);
  if (!gpu.empty()) json["gpu"] = gpu;
  // What made the precision choice (trainer/precision_choice.h): the instruction sets, oneDNN's bf16 path.
  json["hardware"] = detect_hardware(device).summary();
  if (device.is_cuda()) json["cpu_features"] = detect_hardware(torch::kCPU).summary();
  json["torch"] = std::string(TORCH_VERSION);
  json["stoker_commit"] = stoker_commit();
  json["started"] = std::string(started);
  return json.dump();
}

void write_environment(const fs::path& run_dir, torch::Device device) {
  write_file_atomically(run_dir / "environment.json", environment_json(device) + "\n");
}

}  // namespace stoker
