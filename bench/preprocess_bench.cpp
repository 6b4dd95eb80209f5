// stoker_bench_preprocess: times the fused preprocessing kernel (kernels/preprocess.cu) against the
// ATen op chain the loader ran before it (permute -> to(float) -> sub -> mul [-> to(dtype)]
// [-> contiguous]) on a uint8 [B, H, W, C] batch already on the GPU; the host-to-device copy that
// precedes both is the same for both and left out. CUDA events time each; prints a table and one
// JSON line. Without a GPU it says so and exits 0.
//
//   stoker_bench_preprocess [--batch 256] [--size 224] [--channels 3] [--iters 50] [--warmup 10]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <torch/torch.h>

#include "kernels/preprocess.h"

#ifdef STOKER_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace {

struct BenchOptions {
  int64_t batch = 256, size = 224, channels = 3, iters = 50, warmup = 10;
};

int usage(const char* prog, int status) {
  std::fprintf(status ? stderr : stdout,
               "usage: %s [--batch N] [--size S] [--channels C] [--iters N] [--warmup N]\n"
               "Times fused uint8 NHWC -> normalised NCHW / channels-last preprocessing against the ATen op chain.\n",
               prog);
  return status;
}

#ifdef STOKER_WITH_CUDA
struct Case {
  torch::ScalarType dtype;
  bool channels_last;
};

struct Result {
  Case c;
  double fused_ms = 0, aten_ms = 0;
};

// Mean milliseconds per call of f over `iters` calls after `warmup`, timed by events on the stream.
template <typename F>
double time_ms(F&& f, int64_t iters, int64_t warmup) {
  for (int64_t i = 0; i < warmup; ++i) f();
  at::cuda::CUDAEvent start(cudaEventDefault), end(cudaEventDefault);
  const auto stream = c10::cuda::getCurrentCUDAStream();
  start.record(stream);
  for (int64_t i = 0; i < iters; ++i) f();
  end.record(stream);
  end.synchronize();
  return static_cast<double>(start.elapsed_time(end)) / static_cast<double>(iters);
}

int run(const BenchOptions& b) {
  const torch::Device device(torch::kCUDA, 0);
  cudaDeviceProp prop{};
  const std::string name = cudaGetDeviceProperties(&prop, 0) == cudaSuccess ? prop.name : "unknown GPU";
  const int64_t C = b.channels;
  torch::Tensor images = torch::randint(0, 256, {b.batch, b.size, b.size, C},
                                        torch::TensorOptions().dtype(torch::kUInt8).device(device));
  std::vector<float> mean, inv_std;
  const float base_mean[3] = {0.485f, 0.456f, 0.406f}, base_std[3] = {0.229f, 0.224f, 0.225f};
  for (int64_t c = 0; c < C; ++c) {
    mean.push_back(base_mean[c % 3] * 255.0f);
    inv_std.push_back(1.0f / (base_std[c % 3] * 255.0f));
  }
  const torch::Tensor mean_t = torch::tensor(mean).view({1, C, 1, 1}).to(device);
  const torch::Tensor inv_std_t = torch::tensor(inv_std).view({1, C, 1, 1}).to(device);

  const std::vector<Case> cases = {{torch::kFloat32, false}, {torch::kFloat32, true},
                                   {torch::kBFloat16, false}, {torch::kBFloat16, true}};
  std::vector<Result> results;
  for (const Case& c : cases) {
    stoker::kernels::PreprocessOptions o;
    o.mean = mean;
    o.inv_std = inv_std;
    o.dtype = c.dtype;
    o.channels_last = c.channels_last;
    auto fused = [&] { return stoker::kernels::preprocess_images(images, o); };
    auto aten = [&] {
      torch::Tensor x = images.permute({0, 3, 1, 2}).to(torch::kFloat32).sub_(mean_t).mul_(inv_std_t);
      if (c.dtype != torch::kFloat32) x = x.to(c.dtype);
      return c.channels_last ? x : x.contiguous();
    };
    // The two must agree before their times mean anything (the tests state the tolerances).
    const torch::Tensor a = fused().to(torch::kFloat32), r = aten().to(torch::kFloat32);
    const double rtol = c.dtype == torch::kFloat32 ? 1e-6 : 1.0 / 256.0;
    if (!torch::allclose(a, r, rtol, 1e-5)) {
      std::fprintf(stderr, "stoker_bench_preprocess: fused and ATen results differ for %s %s\n",
                   c10::toString(c.dtype), c.channels_last ? "channels-last" : "nchw");
      return 1;
    }
    Result res{c};
    res.fused_ms = time_ms(fused, b.iters, b.warmup);
    res.aten_ms = time_ms(aten, b.iters, b.warmup);
    results.push_back(res);
  }

  const double pixels = static_cast<double>(b.batch * b.size * b.size * C);
  std::printf("preprocess %ldx%ldx%ldx%ld uint8 on %s, mean of %ld calls after %ld warm-up (input on the GPU)\n",
              static_cast<long>(b.batch), static_cast<long>(b.size), static_cast<long>(b.size),
              static_cast<long>(C), name.c_str(), static_cast<long>(b.iters), static_cast<long>(b.warmup));
  std::printf("%-9s %-14s %10s %10s %8s %12s\n", "dtype", "layout", "fused ms", "aten ms", "speedup", "fused GB/s");
  std::string json = fmt::format(
      R"({{"bench":"preprocess","device":"{}","batch":{},"height":{},"width":{},"channels":{},"iters":{},"results":[)",
      name, b.batch, b.size, b.size, C, b.iters);
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    const double bytes = pixels * (1.0 + static_cast<double>(c10::elementSize(r.c.dtype)));
    const double gbps = bytes / (r.fused_ms * 1e-3) / 1e9;
    const char* dtype = r.c.dtype == torch::kFloat32 ? "float32" : "bfloat16";
    const char* layout = r.c.channels_last ? "channels_last" : "nchw";
    std::printf("%-9s %-14s %10.4f %10.4f %7.2fx %12.0f\n", dtype, layout, r.fused_ms, r.aten_ms,
                r.aten_ms / r.fused_ms, gbps);
    json += fmt::format(
        R"({}{{"dtype":"{}","layout":"{}","fused_ms":{:.5f},"aten_ms":{:.5f},"speedup":{:.3f},"fused_gb_per_s":{:.1f}}})",
        i ? "," : "", dtype, layout, r.fused_ms, r.aten_ms, r.aten_ms / r.fused_ms, gbps);
  }
  json += "]}";
  std::printf("%s\n", json.c_str());
  return 0;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  BenchOptions b;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") return usage(argv[0], 0);
    if (i + 1 >= argc) return usage(argv[0], 2);
    char* end = nullptr;
    const long long v = std::strtoll(argv[++i], &end, 10);
    if (*end != '\0' || v < 0 || (v == 0 && arg != "--warmup")) return usage(argv[0], 2);
    if (arg == "--batch") b.batch = v;
    else if (arg == "--size") b.size = v;
    else if (arg == "--channels") b.channels = v;
    else if (arg == "--iters") b.iters = v;
    else if (arg == "--warmup") b.warmup = v;
    else return usage(argv[0], 2);
  }
  if (!stoker::kernels::preprocess_has_cuda_kernel()) {
    std::printf("stoker_bench_preprocess: this build has no CUDA kernels (configured without CUDA); nothing to time\n");
    return 0;
  }
  if (!torch::cuda::is_available()) {
    std::printf("stoker_bench_preprocess: no CUDA GPU is visible (torch::cuda::is_available() is false); nothing to time\n");
    return 0;
  }
#ifdef STOKER_WITH_CUDA
  try {
    return run(b);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stoker_bench_preprocess: %s\n", e.what());
    return 1;
  }
#else
  return 0;
#endif
}
