// stoker_bench_batch_augment: the cost per batch of the batch operations on the device after
// normalisation (data.batch_ops: mixup, random_erasing; data/augmented_source.h) on a normalised float32
// [B, C, H, W] batch already on the device: the median over --iters batches (each a new batch index,
// so new draws) of each configuration, in milliseconds, as a table and one JSON line. On CUDA the
// device is synchronised after each batch.
//
//   stoker_bench_batch_augment [--device cpu|cuda] [--batch 128] [--channels 3] [--size 224] [--iters 30]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <torch/torch.h>

#include "data/augmented_source.h"

namespace {

using stoker::data::BatchOp;

struct BenchOptions {
  std::string device = "cpu";
  int64_t batch = 128, channels = 3, size = 224, iters = 30;
};

struct Case {
  std::string name;
  BatchOp op;
};

std::vector<Case> cases(int64_t batch) {
  using namespace stoker::data;
  auto mix = [](double mixup, double cutmix, const char* mode) {
    MixupSettings s;
    s.mixup_alpha = mixup;
    s.cutmix_alpha = cutmix;
    s.mode = mode;
    return mixup_op(s, 1000, 0.1, 1);
  };
  auto erase = [batch](const char* mode) {
    RandomErasingSettings s;
    s.probability = 0.25;
    s.mode = mode;
    return random_erasing_op(s, 1, batch);
  };
  return {{"mixup batch", mix(0.8, 0, "batch")},   {"cutmix batch", mix(0, 1.0, "batch")},
          {"mixup elem", mix(0.8, 0, "elem")},     {"cutmix elem", mix(0, 1.0, "elem")},
          {"erasing 0.25 const", erase("const")}, {"erasing 0.25 pixel", erase("pixel")}};
}

double median_ms(const Case& c, const torch::Tensor& input, const torch::Tensor& target, int64_t iters) {
  std::vector<double> ms;
  for (int64_t i = 0; i < iters; ++i) {
    stoker::data::Batch b;
    b.input = input;
    b.target = target;
    b.index = i;
    const auto t0 = std::chrono::steady_clock::now();
    c.op(b, 0);
    if (input.is_cuda()) torch::cuda::synchronize();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

bool parse(int argc, char** argv, BenchOptions& o) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    const char* value = argv[i + 1];
    if (key == "--device") o.device = value;
    else if (key == "--batch") o.batch = std::atoll(value);
    else if (key == "--channels") o.channels = std::atoll(value);
    else if (key == "--size") o.size = std::atoll(value);
    else if (key == "--iters") o.iters = std::atoll(value);
    else return false;
  }
  return argc % 2 == 1 && o.batch > 0 && o.channels > 0 && o.size > 0 && o.iters > 0;
}

}  // namespace

int main(int argc, char** argv) {
  BenchOptions o;
  if (!parse(argc, argv, o)) {
    std::fprintf(stderr, "usage: %s [--device cpu|cuda] [--batch N] [--channels C] [--size S] [--iters N]\n", argv[0]);
    return 2;
  }
  if (o.device == "cuda" && !torch::cuda::is_available()) {
    std::printf("no CUDA device here; nothing timed\n");
    return 0;
  }
  const torch::Device device(o.device);
  torch::manual_seed(0);
  const torch::Tensor input = torch::randn({o.batch, o.channels, o.size, o.size}).to(device);
  const torch::Tensor target = torch::randint(1000, {o.batch}, torch::kLong).to(device);
  std::printf("batch operations on %s, float32 [%ld, %ld, %ld, %ld], %d threads, median of %ld batches\n",
              o.device.c_str(), static_cast<long>(o.batch), static_cast<long>(o.channels), static_cast<long>(o.size),
              static_cast<long>(o.size), torch::get_num_threads(), static_cast<long>(o.iters));
  std::string json = fmt::format("{{\"device\":\"{}\",\"batch\":{},\"channels\":{},\"size\":{}", o.device, o.batch,
                                 o.channels, o.size);
  for (const Case& c : cases(o.batch)) {
    const double ms = median_ms(c, input, target, o.iters);
    std::printf("  %-20s %9.3f ms/batch\n", c.name.c_str(), ms);
    json += fmt::format(",\"{}\":{:.4f}", c.name, ms);
  }
  std::printf("%s}\n", json.c_str());
  return 0;
}
