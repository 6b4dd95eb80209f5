// stoker_bench_inference: the CPU inference latency of a checkpoint's model in Stoker's own eval
// forward (the configured model, float32, eval mode) and of its TorchScript export in libtorch
// (torch::jit::load), interleaved call by call on the same random batch, each under
// torch::InferenceMode with --threads intra-op threads. Prints one JSON line per engine: the median,
// first and last quartile of the milliseconds per batch. bench/run_export_bench.sh runs it beside
// ONNX Runtime on the ONNX export of the same checkpoint (bench/onnx_latency.py).
//
//   stoker_bench_inference --checkpoint RUN --torchscript MODEL.ts --input-size HxW --batch N
//                          [--iters 20] [--warmup 3] [--threads 2] [--label NAME]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <torch/script.h>
#include <torch/torch.h>

#include "recipe/export.h"
#include "recipe/tasks.h"
#include "trainer/checkpoint.h"

namespace {

struct BenchOptions {
  std::string checkpoint, torchscript, input_size, label;
  int64_t batch = 1, iters = 20, warmup = 3, threads = 2;
};

BenchOptions parse(int argc, char** argv) {
  BenchOptions o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--checkpoint") o.checkpoint = value;
    else if (flag == "--torchscript") o.torchscript = value;
    else if (flag == "--input-size") o.input_size = value;
    else if (flag == "--label") o.label = value;
    else if (flag == "--batch") o.batch = std::stoll(value);
    else if (flag == "--iters") o.iters = std::stoll(value);
    else if (flag == "--warmup") o.warmup = std::stoll(value);
    else if (flag == "--threads") o.threads = std::stoll(value);
    else throw std::runtime_error("unknown flag " + flag);
  }
  if (o.checkpoint.empty() || o.torchscript.empty() || o.input_size.empty()) {
    throw std::runtime_error("usage: stoker_bench_inference --checkpoint RUN --torchscript MODEL.ts --input-size HxW "
                             "--batch N [--iters 20] [--warmup 3] [--threads 2] [--label NAME]");
  }
  return o;
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const BenchOptions o = parse(argc, argv);
    torch::set_num_threads(static_cast<int>(o.threads));
    const std::filesystem::path checkpoint = stoker::resolve_checkpoint(o.checkpoint);
    stoker::Config config = stoker::checkpoint_task_config(checkpoint, std::nullopt, {});
    config.train.channels_last = false;
    config.train.precision = stoker::Precision::kFp32;
    const auto channels = static_cast<int64_t>(config.data.mean.size());
    const stoker::InputSize size = stoker::parse_input_size(o.input_size);
    const std::unique_ptr<stoker::CheckpointModel> eager =
        stoker::load_checkpoint_model(config, checkpoint, false, {channels, size.height, size.width}, torch::kCPU);
    // The same weights in channels-last (as train.channels_last: true prepares them), fed a
    // channels-last batch: what the layout alone is worth to libtorch on this machine.
    stoker::Config last_config = config;
    last_config.train.channels_last = true;
    const std::unique_ptr<stoker::CheckpointModel> eager_last = stoker::load_checkpoint_model(
        last_config, checkpoint, false, {channels, size.height, size.width}, torch::kCPU);
    torch::jit::Module script = torch::jit::load(o.torchscript, torch::kCPU);
    script.eval();
    const torch::Tensor x = torch::randn({o.batch, channels, size.height, size.width});
    const torch::Tensor x_last = x.contiguous(torch::MemoryFormat::ChannelsLast);

    using Clock = std::chrono::steady_clock;
    const std::vector<std::pair<std::string, std::function<void()>>> engines = {
        {"stoker_eval_forward", [&] { eager->model.forward(x); }},
        {"torchscript_libtorch", [&] { script.forward({x}); }},
        {"stoker_eval_channels_last", [&] { eager_last->model.forward(x_last); }},
    };
    std::vector<std::vector<double>> ms(engines.size());
    torch::InferenceMode inference;
    for (int64_t i = 0; i < o.warmup + o.iters; ++i) {
      for (size_t e = 0; e < engines.size(); ++e) {
        const auto start = Clock::now();
        engines[e].second();
        const double took = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
        if (i >= o.warmup) ms[e].push_back(took);
      }
    }
    for (size_t e = 0; e < engines.size(); ++e) {
      std::printf("%s\n", fmt::format(R"({{"engine":"{}","model":"{}","batch":{},"threads":{},"ms_median":{:.3f},)"
                                      R"("ms_q1":{:.3f},"ms_q3":{:.3f},"iters":{}}})",
                                      engines[e].first, o.label.empty() ? config.model.type() : o.label, o.batch,
                                      o.threads, quantile(ms[e], 0.5), quantile(ms[e], 0.25), quantile(ms[e], 0.75),
                                      o.iters)
                              .c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stoker_bench_inference: %s\n", e.what());
    return 1;
  }
}
