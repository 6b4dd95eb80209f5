// Metrics sinks by type (logging.sinks): where the run's metrics records go, each a registered type
// with its own keys, listed like data.train_transforms:
//   logging:
//     sinks: [{type: metrics_file}, {type: console}, {type: tensorboard},
//             {type: mlflow, tracking_uri: "http://127.0.0.1:5000", experiment: fashion}]
// metrics_file (metrics.jsonl), console (progress and epoch lines), tensorboard (event files in the
// run's tb/) and mlflow (a tracking server) are Stoker's own; an application registers another the
// same way, and its keys are then read, checked and written like these:
//   sink_registry().add("my_sink", {options_of<MySinkOptions>(),
//       [](const TypedOptions& o, const SinkContext& c) { return std::make_shared<MySink>(...); }});
// The recipe builds a SinkContext once and adds every listed sink to the run's MetricsLogger
// (recipe/run_logging.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/options.h"
#include "common/registry.h"
#include "observe/metrics.h"

namespace stoker {

// What every sink may need from the run, built once by the recipe layer.
struct SinkContext {
  std::filesystem::path run_dir;  // <run.dir>/<run.name>/<timestamp>/
  std::string run_name;           // run.name
  std::string runs_dir;           // run.dir
  std::string config_yaml;        // the resolved config
  int64_t log_every_steps = 50;   // train.log_every_steps
  bool live_progress = false;     // a redrawn progress bar (a terminal) rather than plain lines
};

// A registered sink type: its options and how to make the sink from them and the context.
struct SinkType {
  OptionsMaker options;
  std::function<std::shared_ptr<MetricsSink>(const TypedOptions&, const SinkContext&)> create;
};
// metrics_file, console, tensorboard and mlflow; applications may register more.
Registry<SinkType>& sink_registry();

// tensorboard's own keys.
struct TensorBoardSinkOptions : TypeOptionsOf<TensorBoardSinkOptions> {
  std::string dir = "tb";  // the event files' folder, in the run directory
  void visit(OptionsVisitor& v) override;
  void check() const override;
};

// mlflow's own keys.
struct MlflowSinkOptions : TypeOptionsOf<MlflowSinkOptions> {
  std::string tracking_uri;  // http(s)://host:port of `mlflow server` (required)
  std::string experiment;    // empty: run.name; created when the server has none of that name
  std::string run_name;      // empty: <run.name>/<timestamp>, as the run directory is named
  void visit(OptionsVisitor& v) override;
  void check() const override;
};

// A sink of a registered type with its default options, e.g. for building lists in code:
//   make_sink_options("mlflow").as<MlflowSinkOptions>().tracking_uri = "http://127.0.0.1:5000";
TypedOptions make_sink_options(const std::string& type);
// What logging.sinks holds when a recipe does not say: metrics_file, console, tensorboard.
std::vector<TypedOptions> default_sinks();

// The sinks `list` describes, in order, each made by its registered type after its options' check();
// an error names the sink by position and type ("sinks[3] (mlflow): ...").
std::vector<std::shared_ptr<MetricsSink>> make_sinks(const std::vector<TypedOptions>& list, const SinkContext& context);

}  // namespace stoker
