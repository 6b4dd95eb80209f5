// The sink registry (sinks.h) and Stoker's four entries.
#include "observe/sinks.h"

#include <fmt/format.h>

#include "common/error.h"
#include "common/log.h"
#include "observe/console.h"
#include "observe/metrics_file.h"
#include "observe/mlflow.h"
#include "observe/tensorboard.h"

namespace stoker {
namespace {

std::shared_ptr<MetricsSink> metrics_file(const TypedOptions&, const SinkContext& c) {
  return std::make_shared<MetricsFileSink>(c.run_dir / "metrics.jsonl");
}

std::shared_ptr<MetricsSink> console(const TypedOptions&, const SinkContext& c) {
  return std::make_shared<ConsoleSink>(c.live_progress, c.log_every_steps);
}

std::shared_ptr<MetricsSink> tensorboard(const TypedOptions& o, const SinkContext& c) {
  auto sink = std::make_shared<TensorBoardSink>(c.run_dir / o.as<TensorBoardSinkOptions>().dir);
  logger().info("TensorBoard: {} (tensorboard --logdir {})", sink->writer().path().string(), c.runs_dir);
  return sink;
}

// The experiment defaults to run.name and the run's name to the run directory's <run.name>/<timestamp>;
// the params are the resolved config.
std::shared_ptr<MetricsSink> mlflow(const TypedOptions& o, const SinkContext& c) {
  const MlflowSinkOptions& own = o.as<MlflowSinkOptions>();
  MlflowOptions options;
  options.set_tracking_uri(own.tracking_uri)
      .set_experiment(own.experiment.empty() ? c.run_name : own.experiment)
      .set_run_name(own.run_name.empty() ? c.run_name + "/" + c.run_dir.filename().string() : own.run_name);
  options.params = flatten_params(c.config_yaml);
  options.tags = run_tags(c.run_dir);
  options.artifacts = run_artifacts(c.run_dir);
  logger().info("MLflow: sending the run to {} (experiment '{}', run '{}')", options.tracking_uri, options.experiment,
                options.run_name);
  return std::make_shared<MlflowSink>(options);
}

void add_stoker_entries(Registry<SinkType>& r) {
  r.add("metrics_file", {options_of<NoOptions>(), metrics_file});
  r.add("console", {options_of<NoOptions>(), console});
  r.add("tensorboard", {options_of<TensorBoardSinkOptions>(), tensorboard});
  r.add("mlflow", {options_of<MlflowSinkOptions>(), mlflow});
}

}  // namespace

void TensorBoardSinkOptions::visit(OptionsVisitor& v) {
  v.field("dir", dir, rules::non_empty());
}

void TensorBoardSinkOptions::check() const {
  STOKER_CHECK(!std::filesystem::path(dir).is_absolute() && dir.find("..") == std::string::npos,
               "dir ({}) must be a folder inside the run directory (a relative path such as tb)", dir);
}

void MlflowSinkOptions::visit(OptionsVisitor& v) {
  v.field("tracking_uri", tracking_uri,
          rules::matching("(https?://[^/\\s]+(/\\S*)?)?", "the http:// or https:// address of an MLflow tracking "
                          "server (e.g. http://127.0.0.1:5000)"));
  v.field("experiment", experiment, rules::described("an MLflow experiment name (\"\": run.name)"));
  v.field("run_name", run_name, rules::described("an MLflow run name (\"\": <run.name>/<timestamp>)"));
}

void MlflowSinkOptions::check() const {
  STOKER_CHECK(!tracking_uri.empty(), "mlflow needs a tracking_uri, the http:// or https:// address of an MLflow "
               "tracking server (e.g. http://127.0.0.1:5000)");
}

Registry<SinkType>& sink_registry() { return lazy_registry<SinkType, add_stoker_entries>("metrics sink"); }

TypedOptions make_sink_options(const std::string& type) { return TypedOptions(type, sink_registry().get(type).options()); }

std::vector<TypedOptions> default_sinks() {
  return {make_sink_options("metrics_file"), make_sink_options("console"), make_sink_options("tensorboard")};
}

std::vector<std::shared_ptr<MetricsSink>> make_sinks(const std::vector<TypedOptions>& list, const SinkContext& context) {
  std::vector<std::shared_ptr<MetricsSink>> sinks;
  for (size_t i = 0; i < list.size(); ++i) {
    try {
      list[i].options().check();
      sinks.push_back(sink_registry().get(list[i].type()).create(list[i], context));
    } catch (const Error& e) {
      throw Error(fmt::format("sinks[{}] ({}): {}", i, list[i].type(), e.what()));
    }
  }
  return sinks;
}

}  // namespace stoker
