// `trainer`: the command-line program. It parses arguments and calls the library; nothing here
// that a library user would miss.
//
//   trainer [train] --config configs/fashion_mnist.yaml [--set key.path=value]... [--resume RUN]
//   trainer --config configs/fashion_mnist.yaml --print-config
//   trainer bench-data --config configs/fashion_mnist.yaml [--batches N] [--split train|test]
//   trainer bench-step --config bench/step_resnet50.yaml [--steps N] [--set train.precision=bf16-mixed]
//   trainer eval --config configs/fashion_mnist.yaml --checkpoint runs/.../checkpoints/best.pt
//   trainer predict --checkpoint runs/.../checkpoints/best.pt [--top 3] image.png...
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include "common/error.h"
#include "trainer/callbacks.h"
#include "trainer/config.h"
#include "trainer/evaluate.h"
#include "trainer/logging.h"
#include "trainer/run.h"

namespace {

constexpr const char* kUsage = R"(usage: trainer [train] --config FILE [options]
       trainer bench-data --config FILE [--set ...] [--batches N] [--split train|test]
       trainer bench-step --config FILE [--set ...] [--steps N]
       trainer eval --config FILE --checkpoint FILE [--set ...]
       trainer predict --checkpoint FILE [--config FILE] [--set ...] [--top K] [--ema] IMAGE...

train (the default) trains the model a YAML recipe describes, e.g. configs/fashion_mnist.yaml.
bench-data runs the recipe's data pipeline alone, without a model, and reports samples/s, the
time of each stage and the CPU it used. bench-step times the training step alone (forward,
backward, optimizer) on one batch already on the device, with the recipe's model and precision.
eval reports a checkpoint's test loss, top-1 and top-5 on the recipe's test split (and those of
its EMA weights, when it has them), as text and then one JSON line.
predict classifies JPEG/PNG files with a checkpoint, through the eval transforms of its saved
config (or of --config), and prints `IMAGE: class (probability), ...` for the K likeliest classes.

options:
  --config FILE          the recipe (required)
  --set KEY.PATH=VALUE   override one config value; repeatable (e.g. --set train.epochs=3)
  --resume RUN           continue a run: its directory (runs/<name>/<time>) or a checkpoint file
  --print-config         print the resolved config and exit
  --progress MODE        auto (a live bar on a terminal), bar, or lines
  --batches N            bench-data: batches to time (default 200, after 5 warm-up batches)
  --split train|test     bench-data: which loader to time (default train)
  --output float|uint8   bench-data: normalised float batches as training gets them (default), or
                         the uint8 batches as built (to compare with loaders that output uint8)
  --steps N              bench-step: steps to time (default 50, after 10 warm-up steps)
  --checkpoint FILE      eval, predict: the checkpoint (a .pt file or a run directory's last.pt)
  --top K                predict: classes to print per image (default 5)
  --ema                  predict: use the checkpoint's EMA weights (train.ema_decay)
  -h, --help             this text

exit status: 0 done, 1 error, 2 bad command line, 130 stopped by a signal (resume with --resume)
)";

struct Args {
  std::string command = "train";
  std::string config;
  int64_t batches = 200;
  int64_t steps = 50;
  std::string split = "train";
  std::string output = "float";
  std::vector<std::string> overrides;
  std::optional<std::string> resume;
  bool print_config = false;
  std::string progress = "auto";
  std::string checkpoint;
  int64_t top = 5;
  bool ema = false;
  std::vector<std::string> images;  // predict
};

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

Args parse_args(int argc, char** argv) {
  Args args;
  std::vector<std::string> a(argv + 1, argv + argc);
  size_t i = 0;
  if (i < a.size() && (a[i] == "train" || a[i] == "bench-data" || a[i] == "bench-step" || a[i] == "eval" ||
                       a[i] == "predict")) {
    args.command = a[i++];
  }
  auto positive = [](const std::string& flag, const std::string& v) -> int64_t {
    int64_t n = 0;
    try {
      n = std::stoll(v);
    } catch (const std::exception&) {
    }
    if (n <= 0) throw UsageError(flag + " takes a positive number, not '" + v + "'");
    return n;
  };
  auto value = [&](const std::string& flag) -> std::string {
    if (i + 1 >= a.size()) throw UsageError(flag + " needs a value");
    return a[++i];
  };
  for (; i < a.size(); ++i) {
    const std::string& arg = a[i];
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (arg == "--config") {
      args.config = value(arg);
    } else if (arg.rfind("--config=", 0) == 0) {
      args.config = arg.substr(9);
    } else if (arg == "--set") {
      args.overrides.push_back(value(arg));
    } else if (arg.rfind("--set=", 0) == 0) {
      args.overrides.push_back(arg.substr(6));
    } else if (arg == "--resume") {
      args.resume = value(arg);
    } else if (arg == "--batches") {
      args.batches = positive(arg, value(arg));
    } else if (arg == "--steps") {
      args.steps = positive(arg, value(arg));
    } else if (arg == "--split") {
      args.split = value(arg);
      if (args.split != "train" && args.split != "test") throw UsageError("--split takes train or test");
    } else if (arg == "--output") {
      args.output = value(arg);
      if (args.output != "float" && args.output != "uint8") throw UsageError("--output takes float or uint8");
    } else if (arg == "--checkpoint") {
      args.checkpoint = value(arg);
    } else if (arg == "--top") {
      args.top = positive(arg, value(arg));
    } else if (arg == "--ema") {
      args.ema = true;
    } else if (args.command == "predict" && (arg.empty() || arg[0] != '-')) {
      args.images.push_back(arg);
    } else if (arg == "--print-config") {
      args.print_config = true;
    } else if (arg == "--progress") {
      args.progress = value(arg);
      if (args.progress != "auto" && args.progress != "bar" && args.progress != "lines") {
        throw UsageError("--progress takes auto, bar or lines, not '" + args.progress + "'");
      }
    } else {
      throw UsageError("unknown argument '" + arg + "'");
    }
  }
  const bool uses_checkpoint = args.command == "eval" || args.command == "predict";
  if (args.config.empty() && args.command != "predict") throw UsageError("--config FILE is required");
  if (uses_checkpoint && args.checkpoint.empty()) {
    throw UsageError(args.command + " needs --checkpoint FILE");
  }
  if (!uses_checkpoint && !args.checkpoint.empty()) throw UsageError("--checkpoint is for eval and predict");
  if (args.command == "predict" && args.images.empty()) throw UsageError("predict needs one or more image files");
  return args;
}

int bench_data(const Args& args, const stoker::Config& config) {
  const torch::Device device = stoker::resolve_device(config.run.device);
  stoker::configure_threads(config.run.threads, config.data.workers, device.is_cpu());
  const std::shared_ptr<stoker::data::Loader> built =
      stoker::make_loader(config, device, args.split, args.output == "uint8");
  stoker::data::Loader& loader = *built;
  auto& log = stoker::logger();
  log.info("bench-data: {} ({} split: {}, {} output {}x{}x{}, batch {}, {} worker(s), device {})",
           args.config, args.split, config.data.dataset.type(), args.output, loader.out_height(), loader.out_width(), loader.channels(),
           loader.options().batch_size, config.data.workers, device.str());
  const stoker::data::DataBenchResult r = stoker::data::bench_loader(loader, args.batches);
  const double n = static_cast<double>(std::max<int64_t>(1, r.samples));
  const double cores = r.seconds > 0 ? r.cpu_seconds / r.seconds : 0;
  std::printf("samples/s          %10.1f   (%lld batches, %lld samples in %.2f s)\n", r.samples_per_s,
              (long long)r.batches, (long long)r.samples, r.seconds);
  std::printf("CPU in use         %10.2f   cores (user + system time / wall time)\n", cores);
  std::printf("samples/s per core %10.1f\n", cores > 0 ? r.samples_per_s / cores : 0.0);
  std::printf("stage              us/sample (CPU time, summed over workers)\n");
  std::printf("  read             %10.1f\n", 1e6 * r.stages.read / n);
  std::printf("  decode           %10.1f\n", 1e6 * r.stages.decode / n);
  std::printf("  transform        %10.1f   (crop/resize/flip, written into the batch slot)\n", 1e6 * r.stages.transform / n);
  std::printf("  copy + convert   %10.1f   (to the device, uint8 -> normalised float; caller)\n", 1e6 * r.stages.copy / n);
  std::printf("  wait             %10.1f   (caller blocked waiting for workers)\n", 1e6 * r.stages.wait / n);
  if (r.stages.bad_samples > 0) std::printf("bad samples skipped: %lld\n", (long long)r.stages.bad_samples);
  std::printf("%s\n", stoker::JsonLine()
                          .add("samples_per_s", r.samples_per_s)
                          .add("cpu_cores", cores)
                          .add("samples_per_s_per_core", cores > 0 ? r.samples_per_s / cores : 0.0)
                          .add("read_us", 1e6 * r.stages.read / n)
                          .add("decode_us", 1e6 * r.stages.decode / n)
                          .add("transform_us", 1e6 * r.stages.transform / n)
                          .add("copy_us", 1e6 * r.stages.copy / n)
                          .add("wait_us", 1e6 * r.stages.wait / n)
                          .add("workers", config.data.workers)
                          .add("batch_size", loader.options().batch_size)
                          .str()
                          .c_str());
  return 0;
}

int bench_step(const Args& args, const stoker::Config& config) {
  auto& log = stoker::logger();
  log.info("bench-step: {} (model {}, precision {}, channels_last {}, cuda_graph {}, batch {})", args.config,
           config.model.type, config.train.precision, config.train.channels_last, config.train.cuda_graph,
           config.data.batch_size);
  const stoker::StepBenchResult r = stoker::bench_train_step(config, args.steps);
  std::printf("ms/step   %10.3f   (%lld steps in %.2f s on %s%s)\n", r.ms_per_step, (long long)r.steps,
              r.seconds, r.device.c_str(), r.graph ? ", CUDA graph replays" : "");
  std::printf("samples/s %10.1f\n", r.samples_per_s);
  std::printf("%s\n", stoker::JsonLine()
                          .add("model", config.model.type)
                          .add("precision", config.train.precision)
                          .add("channels_last", config.train.channels_last)
                          .add("cuda_graph", r.graph)
                          .add("batch_size", r.batch_size)
                          .add("ms_per_step", r.ms_per_step)
                          .add("samples_per_s", r.samples_per_s)
                          .add("device", r.device)
                          .str()
                          .c_str());
  return 0;
}

std::string percent(double fraction) { return fmt::format("{:.2f}%", 100.0 * fraction); }

int eval(const Args& args, const stoker::Config& config) {
  const std::filesystem::path checkpoint = stoker::resolve_checkpoint(args.checkpoint);
  const stoker::CheckpointEvaluation e = stoker::evaluate_checkpoint(config, checkpoint);
  std::printf("checkpoint %s (%lld epoch(s) done, step %lld)\n", checkpoint.c_str(), (long long)e.state.epoch,
              (long long)e.state.step);
  std::printf("test       loss %.4f, top-1 %s, top-5 %s (%lld samples)\n", e.model.loss,
              percent(e.model.top1).c_str(), percent(e.model.top5).c_str(), (long long)e.model.samples);
  stoker::JsonLine json;
  json.add("checkpoint", checkpoint.string())
      .add("samples", e.model.samples)
      .add("test_loss", e.model.loss)
      .add("test_top1", e.model.top1)
      .add("test_top5", e.model.top5);
  if (e.ema) {
    std::printf("EMA test   loss %.4f, top-1 %s, top-5 %s\n", e.ema->loss, percent(e.ema->top1).c_str(),
                percent(e.ema->top5).c_str());
    json.add("ema_test_loss", e.ema->loss).add("ema_test_top1", e.ema->top1).add("ema_test_top5", e.ema->top5);
  }
  std::printf("%s\n", json.str().c_str());
  return 0;
}

int predict(const Args& args) {
  stoker::PredictRequest request;
  request.checkpoint = stoker::resolve_checkpoint(args.checkpoint);
  if (!args.config.empty()) request.config_file = args.config;
  request.overrides = args.overrides;
  request.images.assign(args.images.begin(), args.images.end());
  request.top_k = args.top;
  request.use_ema = args.ema;
  for (const stoker::ImagePrediction& p : stoker::predict_images(request)) {
    std::vector<std::string> classes;
    for (size_t i = 0; i < p.classes.size(); ++i) {
      classes.push_back(fmt::format("{} ({:.4f})", p.classes[i], p.probabilities[i]));
    }
    std::printf("%s: %s\n", p.image.c_str(), fmt::format("{}", fmt::join(classes, ", ")).c_str());
  }
  return 0;
}

int run(int argc, char** argv) {
  const Args args = parse_args(argc, argv);
  if (args.command == "predict") return predict(args);
  stoker::Config config = stoker::load_config(args.config, args.overrides);
  if (args.print_config) {
    std::fputs(stoker::config_to_yaml(config).c_str(), stdout);
    return 0;
  }
  if (args.command == "bench-data") return bench_data(args, config);
  if (args.command == "bench-step") return bench_step(args, config);
  if (args.command == "eval") return eval(args, config);
  stoker::TrainRequest request;
  request.config = config;
  if (args.resume) request.resume = *args.resume;
  request.live_progress = args.progress == "bar" || (args.progress == "auto" && ::isatty(STDOUT_FILENO));
  stoker::install_stop_signal_handlers();

  auto& log = stoker::logger();
  log.info("stoker trainer: {}{}", args.config,
           args.overrides.empty() ? "" : fmt::format(" with --set {}", fmt::join(args.overrides, " --set ")));
  const stoker::TrainOutcome out = stoker::run_training(request);

  const auto& state = out.state;
  double seconds = out.fit.seconds;
  log.info("---- summary ----");
  log.info("run directory:   {}", out.run_dir.string());
  log.info("epochs done:     {} of {} ({} optimizer steps)", state.epoch, config.train.epochs, state.step);
  if (out.final_test.samples > 0) {
    log.info("final test:      top-1 {:.2f}%, top-5 {:.2f}%, loss {:.4f} ({} samples)",
             100.0 * out.final_test.top1, 100.0 * out.final_test.top5, out.final_test.loss,
             out.final_test.samples);
  }
  if (out.final_ema_test.samples > 0) {
    log.info("final EMA test:  top-1 {:.2f}%, top-5 {:.2f}%, loss {:.4f}", 100.0 * out.final_ema_test.top1,
             100.0 * out.final_ema_test.top5, out.final_ema_test.loss);
  }
  if (out.fit.stopped_early) log.info("stopped early:   train.early_stopping (see the log above)");
  if (state.best_epoch >= 0) {
    log.info("best {}:  {:.4f} at epoch {} (checkpoints/best.pt)", config.checkpoint.best_metric,
             state.best_metric, state.best_epoch + 1);
  }
  log.info("training time:   {} in this invocation", stoker::format_duration(seconds));
  if (out.fit.interrupted) {
    log.warn("stopped early; continue with: trainer --config {} --resume {}", args.config,
             out.run_dir.string());
    return 130;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "trainer: %s\n\n%s", e.what(), kUsage);
    return 2;
  } catch (const stoker::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    // libtorch (c10::Error) and the standard library: show the first line, which says what failed.
    std::string what = e.what();
    std::fprintf(stderr, "error: %s\n", what.substr(0, what.find('\n')).c_str());
    return 1;
  }
}
