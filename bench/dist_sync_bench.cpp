// stoker_bench_dist_sync: a training run, as `trainer --config FILE [--set k=v]...` starts it, with the
// data-parallel gradient sync chosen by --grad-sync: overlap (the c10d Reducer, as shipped),
// after_backward (one all-reduce of every gradient once backward has returned) or none (no sync: the
// compute-only time). bench/run_dist_bench.sh starts it under torchrun for the two variants the
// library ships only for this comparison (distributed::ProcessGroupOptions::grad_sync).
//
//   stoker_bench_dist_sync --grad-sync after_backward --config bench/dist_mlp.yaml --set run.threads=1
#include <cstdio>
#include <string>
#include <vector>

#include "common/error.h"
#include "recipe/run.h"

int main(int argc, char** argv) {
  std::string config_file, grad_sync = "overlap";
  std::vector<std::string> overrides;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--config" && has_value) {
      config_file = argv[++i];
    } else if (arg == "--set" && has_value) {
      overrides.push_back(argv[++i]);
    } else if (arg == "--grad-sync" && has_value) {
      grad_sync = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s --config FILE [--set key=value]... [--grad-sync overlap|after_backward|none]\n",
                   argv[0]);
      return 2;
    }
  }
  if (config_file.empty()) {
    std::fprintf(stderr, "%s: --config FILE is required\n", argv[0]);
    return 2;
  }
  try {
    stoker::TrainRequest request;
    request.config = stoker::load_config(config_file, overrides);
    request.process_group.grad_sync = grad_sync;
    stoker::run_training(request);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
