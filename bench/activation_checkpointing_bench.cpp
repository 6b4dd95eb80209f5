// stoker_bench_activation_checkpointing: what model.activation_checkpointing costs and saves on one
// model (bench/run_dist_features_bench.sh runs it):
//   --checkpointing off|on   training steps (forward, backward, SGD step) on random data: the median
//                            step time and the process's peak resident memory over them (VmHWM, reset
//                            after the model and its first step: weights, gradients, optimizer state
//                            and the step's activations)
//   --check-gradients        one step of the same batch both ways: the largest difference of the
//                            gradients, absolute and relative to the largest gradient
// One JSON line on stdout. A fresh process per measurement, so that one's heap does not hide the other's.
//
//   stoker_bench_activation_checkpointing --model resnet50 --batch 32 --size 224 --steps 3 --checkpointing on
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <torch/torch.h>

#include "common/hardware.h"
#include "models/activation_checkpointing.h"
#include "models/registry.h"

namespace {

struct Args {
  std::string model = "resnet50", checkpointing = "off";
  int64_t batch = 32, size = 224, steps = 3, classes = 1000;
  bool check_gradients = false;
};

torch::nn::AnyModule build(const Args& a, bool checkpointing) {
  torch::manual_seed(0);
  torch::nn::AnyModule m = stoker::models::create_model(stoker::models::model_options(a.model), {3, a.classes});
  stoker::models::BlockSelection all;
  all.all = checkpointing;
  stoker::models::apply_activation_checkpointing(*m.ptr(), all, a.model);
  return m;
}

torch::Tensor loss_of(torch::nn::AnyModule& m, const torch::Tensor& x, const torch::Tensor& y) {
  return torch::nn::functional::cross_entropy(m.forward(x), y);
}

void check_gradients(const Args& a) {
  torch::manual_seed(1);
  const torch::Tensor x = torch::randn({a.batch, 3, a.size, a.size}), y = torch::randint(a.classes, {a.batch});
  std::vector<std::vector<torch::Tensor>> grads;
  for (bool on : {false, true}) {
    torch::nn::AnyModule m = build(a, on);
    loss_of(m, x, y).backward();
    grads.emplace_back();
    for (const auto& p : m.ptr()->parameters()) grads.back().push_back(p.grad().clone());
  }
  double worst = 0, largest = 0;
  for (size_t i = 0; i < grads[0].size(); ++i) {
    worst = std::max(worst, (grads[0][i] - grads[1][i]).abs().max().item<double>());
    largest = std::max(largest, grads[0][i].abs().max().item<double>());
  }
  std::printf("{\"model\": \"%s\", \"batch\": %lld, \"size\": %lld, \"max_abs_diff\": %.3g, \"max_rel_diff\": %.3g}\n",
              a.model.c_str(), static_cast<long long>(a.batch), static_cast<long long>(a.size), worst, worst / largest);
}

void time_steps(const Args& a) {
  const bool on = a.checkpointing == "on";
  torch::nn::AnyModule m = build(a, on);
  torch::optim::SGD sgd(m.ptr()->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  torch::manual_seed(1);
  const torch::Tensor x = torch::randn({a.batch, 3, a.size, a.size}), y = torch::randint(a.classes, {a.batch});
  std::vector<double> ms;
  for (int64_t s = 0; s <= a.steps; ++s) {
    if (s == 1) stoker::reset_peak_memory(torch::kCPU);  // after the first step made the gradients and the state
    const auto t0 = std::chrono::steady_clock::now();
    sgd.zero_grad(/*set_to_none=*/false);
    loss_of(m, x, y).backward();
    sgd.step();
    if (s > 0) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  std::printf("{\"model\": \"%s\", \"batch\": %lld, \"size\": %lld, \"checkpointing\": \"%s\", \"step_ms\": %.1f, "
              "\"peak_rss_mib\": %.0f, \"threads\": %d}\n",
              a.model.c_str(), static_cast<long long>(a.batch), static_cast<long long>(a.size), a.checkpointing.c_str(),
              ms[ms.size() / 2], stoker::peak_memory_bytes(torch::kCPU) / (1 << 20), torch::get_num_threads());
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool value = i + 1 < argc;
    if (arg == "--model" && value) a.model = argv[++i];
    else if (arg == "--checkpointing" && value) a.checkpointing = argv[++i];
    else if (arg == "--batch" && value) a.batch = std::stoll(argv[++i]);
    else if (arg == "--size" && value) a.size = std::stoll(argv[++i]);
    else if (arg == "--steps" && value) a.steps = std::stoll(argv[++i]);
    else if (arg == "--check-gradients") a.check_gradients = true;
    else {
      std::fprintf(stderr, "usage: %s [--model M] [--batch N] [--size S] [--steps N] [--checkpointing off|on] "
                   "[--check-gradients]\n", argv[0]);
      return 2;
    }
  }
  try {
    if (a.check_gradients) {
      check_gradients(a);
    } else {
      time_steps(a);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
