#include "recipe/run_logging.h"

#include <map>

#include <fmt/format.h>

#include "common/log.h"
#include "common/error.h"
#include "observe/sinks.h"
#include "observe/telemetry.h"
#include "recipe/parts.h"
#include "trainer/keep_rng.h"

namespace stoker {
namespace fs = std::filesystem;

Efficiency measure_efficiency(const Config& config, const data::InputShape& shape, torch::Device device) {
  if (!config.logging.flops) return {};
  const KeepRng keep_rng;  // building the copy draws random numbers
  torch::nn::AnyModule model = make_model(config, shape);
  return measure_efficiency(model, shape, device, config.train.precision);
}

std::function<double(int64_t)> training_flops_by_epoch(const Config& config, int64_t channels) {
  const data::ResolutionSchedule& schedule = config.data.resolution_schedule;
  if (!config.logging.flops || !schedule.enabled()) return {};
  const KeepRng keep_rng;
  // Built for the first epoch's size (a ViT resizes its position embedding to the others).
  torch::nn::AnyModule model = make_model(config, {channels, schedule.size_at(0), schedule.size_at(0)});
  std::map<int64_t, double> by_size;
  for (int64_t epoch = 0; epoch < config.train.epochs; ++epoch) {
    const int64_t size = schedule.size_at(epoch);
    if (by_size.count(size) > 0) continue;
    by_size[size] = models::training_flops_per_sample(model, {channels, size, size});
  }
  return [schedule, by_size](int64_t epoch) {
    const auto found = by_size.find(schedule.size_at(epoch));
    return found == by_size.end() ? 0.0 : found->second;
  };
}

std::shared_ptr<MetricsLogger> add_run_metrics(Trainer& trainer, const RunPlan& plan, const fs::path& run_dir,
                                               bool live_progress, const Efficiency& efficiency) {
  const Config& config = plan.config;
  MetricsOptions options;
  options.set_log_every_steps(config.train.log_every_steps)
      .set_flops(efficiency.train_flops_per_sample, efficiency.peak_flops);
  if (config.logging.telemetry) {
    TelemetryOptions telemetry;
    telemetry.interval_s = config.logging.telemetry_interval_s;
    std::shared_ptr<TelemetrySampler> sampler = start_gpu_telemetry(plan.device, telemetry);
    if (sampler) options.set_telemetry([sampler] { return sampler->take_mean(); });
  }
  auto metrics = std::make_shared<MetricsLogger>(options);
  SinkContext context;
  context.run_dir = run_dir;
  context.run_name = config.run.name;
  context.runs_dir = config.run.dir;
  context.config_yaml = plan.yaml;
  context.log_every_steps = config.train.log_every_steps;
  context.live_progress = live_progress;
  try {
    for (auto& sink : make_sinks(config.logging.sinks, context)) metrics->add_sink(std::move(sink));
  } catch (const Error& e) {
    throw Error(fmt::format("logging.{}", e.what()));
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
