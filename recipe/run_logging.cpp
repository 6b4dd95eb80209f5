#include "recipe/run_logging.h"

#include <map>

#include <fmt/format.h>

#include "common/log.h"
#include "observe/console.h"
#include "observe/metrics_file.h"
#include "observe/mlflow.h"
#include "observe/telemetry.h"
#include "observe/tensorboard.h"
#include "recipe/factory.h"
#include "trainer/keep_rng.h"

namespace stoker {
namespace fs = std::filesystem;

Efficiency measure_efficiency(const Config& config, const data::InputShape& shape, torch::Device device) {
  if (!config.logging.flops) return {};
  const KeepRng keep_rng;  // building the copy draws random numbers
  torch::nn::AnyModule model = make_model(config, shape.channels);
  return measure_efficiency(model, shape, device, config.train.precision);
}

std::function<double(int64_t)> training_flops_by_epoch(const Config& config, int64_t channels) {
  const data::ResolutionSchedule& schedule = config.data.resolution_schedule;
  if (!config.logging.flops || !schedule.enabled()) return {};
  const KeepRng keep_rng;
  torch::nn::AnyModule model = make_model(config, channels);
  std::map<int64_t, double> by_size;
  for (int64_t epoch = 0; epoch < config.train.epochs; ++epoch) {
    const int64_t size = schedule.size_at(epoch);
    if (by_size.count(size) > 0) continue;
    by_size[size] = 3 * models::count_forward_flops(model, {channels, size, size}).flops();
  }
  return [schedule, by_size](int64_t epoch) {
    const auto found = by_size.find(schedule.size_at(epoch));
    return found == by_size.end() ? 0.0 : found->second;
  };
}

namespace {

// logging.mlflow as the MLflow sink's options: the experiment defaults to run.name and the run's name
// to the run directory's <run.name>/<timestamp>; the params are the resolved config.
MlflowOptions mlflow_options(const Config& config, const fs::path& run_dir) {
  const MlflowLoggingOptions& mlflow = config.logging.mlflow;
  MlflowOptions options;
  options.set_tracking_uri(mlflow.tracking_uri)
      .set_experiment(mlflow.experiment.empty() ? config.run.name : mlflow.experiment)
      .set_run_name(mlflow.run_name.empty() ? config.run.name + "/" + run_dir.filename().string() : mlflow.run_name);
  options.params = flatten_params(config_to_yaml(config));
  options.tags = run_tags(run_dir);
  options.artifacts = run_artifacts(run_dir);
  return options;
}

}  // namespace

std::shared_ptr<MetricsLogger> add_run_metrics(Trainer& trainer, const Config& config, const fs::path& run_dir,
                                               bool live_progress, const Efficiency& efficiency,
                                               torch::Device device) {
  MetricsOptions options;
  options.set_log_every_steps(config.train.log_every_steps)
      .set_flops(efficiency.train_flops_per_sample, efficiency.peak_flops);
  if (config.logging.telemetry) {
    TelemetryOptions telemetry;
    telemetry.interval_s = config.logging.telemetry_interval_s;
    std::shared_ptr<TelemetrySampler> sampler = start_gpu_telemetry(device, telemetry);
    if (sampler) options.set_telemetry([sampler] { return sampler->take_mean(); });
  }
  auto metrics = std::make_shared<MetricsLogger>(options);
  metrics->add_sink(std::make_shared<MetricsFileSink>(run_dir / "metrics.jsonl"));
  metrics->add_sink(std::make_shared<ConsoleSink>(live_progress, config.train.log_every_steps));
  if (config.logging.tensorboard) {
    auto tensorboard = std::make_shared<TensorBoardSink>(run_dir / "tb");
    logger().info("TensorBoard: {} (tensorboard --logdir {})", tensorboard->writer().path().string(), config.run.dir);
    metrics->add_sink(tensorboard);
  }
  if (!config.logging.mlflow.tracking_uri.empty()) {
    const MlflowOptions mlflow = mlflow_options(config, run_dir);
    logger().info("MLflow: sending the run to {} (experiment '{}', run '{}')", mlflow.tracking_uri, mlflow.experiment,
                  mlflow.run_name);
    metrics->add_sink(std::make_shared<MlflowSink>(mlflow));
  }
  trainer.add_callback(metrics);
  return metrics;
}

namespace {
class SampleDigestLog : public Callback {
 public:
  void on_train_step_end(Trainer&, const StepInfo& step) override {
    if (!step.optimizer_step) return;
    logger().info("samples of step {} (epoch {}, batch {}): digest {:016x}", step.step, step.epoch + 1, step.batch + 1,
                  step.samples_digest);
  }
};
}  // namespace

void add_sample_digest_log(Trainer& trainer) { trainer.add_callback(std::make_shared<SampleDigestLog>()); }

}  // namespace stoker
