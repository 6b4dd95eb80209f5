#include "trainer/run_observe.h"

#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <torch/torch.h>
#include <torch/version.h>

#include "common/atomic_write.h"
#include "trainer/callbacks.h"
#include "trainer/keep_rng.h"
#include "trainer/logging.h"
#include "trainer/precision_choice.h"
#include "trainer/run.h"
#include "trainer/tensorboard.h"

#ifdef STOKER_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace stoker {
namespace fs = std::filesystem;

models::MathType math_type_of(Precision precision) {
  switch (precision) {
    case Precision::kFp32: return models::MathType::kFp32;
    case Precision::kTf32: return models::MathType::kTf32;
    case Precision::kFp16Mixed: return models::MathType::kFp16;
    case Precision::kBf16Mixed:
    case Precision::kBf16True: return models::MathType::kBf16;
    case Precision::kAuto: break;  // resolved before a run measures anything
  }
  return models::MathType::kFp32;
}

Efficiency measure_efficiency(const Config& config, int64_t channels, int64_t height, int64_t width,
                              torch::Device device) {
  Efficiency e;
  if (!config.logging.flops) return e;
  const KeepRng keep_rng;
  torch::nn::AnyModule model = make_model(config, channels);
  const models::FlopCount count = models::count_forward_flops(model, {channels, height, width});
  e.train_flops_per_sample = 3 * count.flops();
  const models::MathType math = math_type_of(config.train.precision);
  const std::optional<double> peak = models::device_peak_flops(device, math, &e.peak_source);
  e.peak_flops = peak.value_or(0.0);
  logger().info("FLOPs: {:.3g} G MACs per {}x{}x{} sample forward ({} convolution(s), {} matrix product(s)), "
                "{:.3g} GFLOPs per sample trained; peak {} ({})",
                count.macs() / 1e9, channels, height, width, count.convolutions, count.matmuls,
                e.train_flops_per_sample / 1e9,
                peak ? fmt::format("{:.3g} TFLOP/s", *peak / 1e12) : std::string("unknown: no MFU"),
                e.peak_source);
  return e;
}

std::optional<GpuSample> TelemetryReading::at_step(int64_t step) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (step != step_) {
    step_ = step;
    sample_ = sampler_->take_mean();
  }
  return sample_;
}

std::shared_ptr<TelemetryReading> start_run_telemetry(const Config& config, torch::Device device) {
  if (!config.logging.telemetry) return nullptr;
  TelemetryOptions options;
  options.interval_s = config.logging.telemetry_interval_s;
  std::unique_ptr<TelemetrySampler> sampler = start_gpu_telemetry(device, options);
  if (!sampler) return nullptr;
  return std::make_shared<TelemetryReading>(std::move(sampler));
}

void add_logging_callbacks(Trainer& trainer, const Config& config, const fs::path& run_dir, bool live_progress,
                           const Efficiency& efficiency, const std::shared_ptr<TelemetryReading>& telemetry) {
  MetricsOptions metrics;
  metrics.train_flops_per_sample = efficiency.train_flops_per_sample;
  metrics.peak_flops = efficiency.peak_flops;
  if (telemetry) metrics.telemetry = [telemetry](int64_t step) { return telemetry->at_step(step); };
  const auto metrics_callback = std::make_shared<MetricsCallback>(run_dir / "metrics.jsonl", live_progress,
                                                                  config.train.log_every_steps, metrics);
  trainer.add_callback(metrics_callback);
  if (!config.logging.tensorboard) return;
  TensorBoardOptions tb;
  tb.log_every_steps = config.train.log_every_steps;
  tb.train_flops_per_sample = efficiency.train_flops_per_sample;
  tb.peak_flops = efficiency.peak_flops;
  auto callback = std::make_shared<TensorBoardCallback>(run_dir / "tb", tb);
  if (telemetry) {
    // The TensorBoard callback logs at optimizer steps; trainer.state().step is the step it logs.
    Trainer* t = &trainer;
    callback->add_source([telemetry, t] { return telemetry_scalars(telemetry->at_step(t->state().step)); });
  }
  // GPU idle: reading it consumes the Trainer's CUDA-event window, so the metrics callback takes it
  // and this one logs the same value; callbacks run in the order added, so at a logging step the
  // metrics callback has already taken this window's reading.
  callback->add_source([metrics_callback] { return gpu_idle_scalars(metrics_callback->gpu_idle()); });
  logger().info("TensorBoard: {} (tensorboard --logdir {})", callback->writer().path().string(),
                config.run.dir);
  trainer.add_callback(callback);
}

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
  JsonLine json;
  json.add("host", std::string(host))
      .add("cpu", cpu_model())
      .add("cpu_cores", static_cast<int64_t>(std::thread::hardware_concurrency()))
      .add("device", device.str());
  const std::string gpu = gpu_name(device);
  if (!gpu.empty()) json.add("gpu", gpu);
  // What made the precision choice (trainer/precision_choice.h): the instruction sets, oneDNN's bf16 path.
  json.add("hardware", detect_hardware(device).summary());
  if (device.is_cuda()) json.add("cpu_features", detect_hardware(torch::kCPU).summary());
  json.add("torch", std::string(TORCH_VERSION))
      .add("stoker_commit", stoker_commit())
      .add("started", std::string(started));
  return json.str();
}

void write_environment(const fs::path& run_dir, torch::Device device) {
  write_file_atomically(run_dir / "environment.json", environment_json(device) + "\n");
}

}  // namespace stoker
