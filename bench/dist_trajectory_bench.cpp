// stoker_bench_dist_trajectory: a training run of a recipe, alone or as one rank under torchrun, that
// records what bench/run_dist_features_bench.sh compares between 1, 2 and 4 processes, DDP and ZeRO-1,
// with and without SyncBatchNorm:
//   OUT/losses.jsonl   one line per optimizer step: the loss of the global batch (the sample-weighted
//                      mean over the ranks' batches) {"step": S, "loss": L}
//   OUT/weights.pt     the final weights and buffers (Python: torch.load gives {name: tensor})
//   OUT/summary.json   {"world": N, "steps": S, "step_ms": the median step time after the first 5,
//                       "state_bytes": [optimizer-state bytes each rank holds]}
// Rank 0 writes them; the run directory itself goes where run.dir says.
//
// --grad-sync overlap | after_backward | none picks the gradient sync (distributed/process_group.h
// ProcessGroupOptions::grad_sync), to measure how much of it backward hides.
//
//   stoker_bench_dist_trajectory --config bench/dist_compact.yaml --out /tmp/one [--set key=value]...
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include "common/error.h"
#include "recipe/factory.h"
#include "recipe/join.h"
#include "recipe/resolve.h"
#include "parallel/sharded_optimizer.h"

namespace {

// Each optimizer step's global loss and host time.
class Recorder : public stoker::Callback {
 public:
  void on_train_step_end(stoker::Trainer& trainer, const stoker::StepInfo& info) override {
    loss_sum_ += info.loss.item<double>() * static_cast<double>(info.samples);
    samples_ += static_cast<double>(info.samples);
    seconds_ += info.step_seconds;
    if (!info.optimizer_step) return;
    std::vector<double> sums = {loss_sum_, samples_};
    trainer.strategy().sum(sums);
    losses.push_back(sums[0] / sums[1]);
    step_ms.push_back(1e3 * seconds_);
    loss_sum_ = samples_ = seconds_ = 0;
  }
  std::vector<double> losses, step_ms;

 private:
  double loss_sum_ = 0, samples_ = 0, seconds_ = 0;
};

double median_after_warmup(std::vector<double> v) {
  if (v.size() > 6) v.erase(v.begin(), v.begin() + 5);
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

void write_results(stoker::Trainer& trainer, const Recorder& recorder, const std::filesystem::path& out) {
  const int64_t world = trainer.strategy().world_size();
  const int64_t rank = trainer.strategy().rank();
  std::vector<double> bytes(static_cast<size_t>(world), 0.0);
  bytes[static_cast<size_t>(rank)] = static_cast<double>(stoker::parallel::optimizer_state_bytes(trainer.optimizer()));
  trainer.strategy().sum(bytes);
  if (rank != 0) return;
  std::filesystem::create_directories(out);
  std::ofstream losses(out / "losses.jsonl");
  for (size_t i = 0; i < recorder.losses.size(); ++i) {
    losses << fmt::format("{{\"step\": {}, \"loss\": {:.9g}}}\n", i + 1, recorder.losses[i]);
  }
  c10::Dict<std::string, torch::Tensor> weights;
  for (const auto& p : trainer.module().named_parameters()) weights.insert(p.key(), p.value().detach().cpu());
  for (const auto& b : trainer.module().named_buffers()) weights.insert(b.key(), b.value().detach().cpu());
  const std::vector<char> pickled = torch::pickle_save(weights);
  std::ofstream(out / "weights.pt", std::ios::binary).write(pickled.data(), static_cast<std::streamsize>(pickled.size()));
  std::string state;
  for (double b : bytes) state += fmt::format("{}{:.0f}", state.empty() ? "" : ", ", b);
  std::ofstream(out / "summary.json") << fmt::format("{{\"world\": {}, \"steps\": {}, \"step_ms\": {:.3f}, \"state_bytes\": [{}]}}\n",
                                                     world, recorder.losses.size(), median_after_warmup(recorder.step_ms), state);
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_file, out;
  stoker::distributed::ProcessGroupOptions group_options;
  std::vector<std::string> overrides;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--config" && i + 1 < argc) {
      config_file = argv[++i];
    } else if (arg == "--out" && i + 1 < argc) {
      out = argv[++i];
    } else if (arg == "--set" && i + 1 < argc) {
      overrides.push_back(argv[++i]);
    } else if (arg == "--grad-sync" && i + 1 < argc) {
      group_options.grad_sync = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s --config FILE --out DIR [--set key=value]... [--grad-sync overlap|after_backward|none]\n",
                   argv[0]);
      return 2;
    }
  }
  if (config_file.empty() || out.empty()) {
    std::fprintf(stderr, "%s: --config FILE and --out DIR are required\n", argv[0]);
    return 2;
  }
  try {
    stoker::Config config = stoker::load_config(config_file, overrides);
    const stoker::Distributed distributed = stoker::start_distributed(config, group_options);
    stoker::TrainingSetup setup = stoker::make_training(stoker::resolve_plan(config, distributed), distributed);
    auto recorder = std::make_shared<Recorder>();
    setup.trainer->add_callback(recorder);
    setup.trainer->fit();
    write_results(*setup.trainer, *recorder, out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
