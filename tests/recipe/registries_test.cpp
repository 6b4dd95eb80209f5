// The extension points as an application uses them: a metrics sink and a batch operation registered
// from outside the library (as apps/embed_example registers a model), configured from YAML like
// Stoker's own (their keys read, checked and written back), and used by a run.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>

#include <fmt/format.h>

#include "data/batch_ops.h"
#include "observe/sinks.h"
#include "recipe/run.h"
#include "test_config.h"

namespace stoker {
namespace {
namespace fs = std::filesystem;

// A sink that writes how many records it saw into <run_dir>/<file> at the end.
struct TallyOptions : TypeOptionsOf<TallyOptions> {
  std::string file = "tally.txt";
  void visit(OptionsVisitor& v) override { v.field("file", file, rules::non_empty()); }
};
class TallySink : public MetricsSink {
 public:
  explicit TallySink(fs::path path) : path_(std::move(path)) {}
  void step(const StepRecord&) override { ++steps_; }
  void epoch(const EpochRecord&) override { ++epochs_; }
  void end(const FitResult&) override { std::ofstream(path_) << steps_ << " steps, " << epochs_ << " epochs\n"; }

 private:
  fs::path path_;
  int64_t steps_ = 0, epochs_ = 0;
};

// A batch operation that counts the batches it saw and scales the input.
std::atomic<int64_t> g_scaled{0};
struct ScaleOptions : TypeOptionsOf<ScaleOptions> {
  double factor = 1.0;
  void visit(OptionsVisitor& v) override { v.field("factor", factor, rules::positive()); }
};

void register_once() {
  if (!sink_registry().contains("test_tally")) {
    sink_registry().add("test_tally", {options_of<TallyOptions>(), [](const TypedOptions& o, const SinkContext& c) {
                                         return std::make_shared<TallySink>(c.run_dir / o.as<TallyOptions>().file);
                                       }});
  }
  if (!data::batch_op_registry().contains("test_scale")) {
    data::batch_op_registry().add(
        "test_scale", {options_of<ScaleOptions>(),
                       [](const TypedOptions& o, const data::BatchOpContext&) -> data::BatchOp {
                         const double factor = o.as<ScaleOptions>().factor;
                         return [factor](data::Batch& b, int64_t) {
                           ++g_scaled;
                           b.input = b.input * factor;
                         };
                       },
                       [](const TypedOptions& o, const data::BatchOpContext&) {
                         return fmt::format("inputs scaled by {:g}", o.as<ScaleOptions>().factor);
                       }});
  }
}

TEST(Registries, AnApplicationsSinkAndBatchOperationAreConfiguredFromYaml) {
  register_once();
  testing::TempDir data, runs;
  testing::write_synthetic_idx_dataset(data.path(), 128, 64, 12);
  const std::string yaml = config_to_yaml(testing::tiny_config(data.path(), runs.path()));
  TrainRequest request;
  request.config = parse_config(yaml, "app.yaml",
                                {"logging.sinks=[{type: metrics_file}, {type: test_tally, file: counted.txt}]",
                                 "data.batch_ops=[{type: test_scale, factor: 0.5}]", "train.epochs=2"});
  ASSERT_EQ(request.config.logging.sinks.size(), 2u);
  EXPECT_EQ(request.config.logging.sinks[1].as<TallyOptions>().file, "counted.txt");
  EXPECT_EQ(request.config.data.batch_ops[0].as<ScaleOptions>().factor, 0.5);
  // Written back and read again, as a run's config.yaml and checkpoints hold it.
  const Config again = parse_config(config_to_yaml(request.config), "saved.yaml");
  EXPECT_EQ(again.logging.sinks[1].as<TallyOptions>().file, "counted.txt");
  EXPECT_EQ(again.data.batch_ops[0].as<ScaleOptions>().factor, 0.5);

  g_scaled = 0;
  const TrainOutcome out = run_training(request);
  EXPECT_EQ(out.state.step, 8);  // 2 epochs of 4 batches
  EXPECT_EQ(g_scaled.load(), 8);
  EXPECT_EQ(testing::read_bytes(out.run_dir / "counted.txt"), "2 steps, 2 epochs\n");  // logged every 4 steps
  EXPECT_CONTAINS(testing::read_bytes(out.run_dir / "train.log"), "data.batch_ops[0] (test_scale): inputs scaled by 0.5");
  EXPECT_FALSE(fs::exists(out.run_dir / "tb"));  // not listed: no TensorBoard
}

TEST(Registries, AnApplicationsKeysAreCheckedLikeStokersOwn) {
  register_once();
  const auto error = [](const std::string& set) {
    return testing::error_of([&] { parse_config("", "app.yaml", {set}); });
  };
  EXPECT_CONTAINS(error("logging.sinks=[{type: test_tally, fiel: x.txt}]"), "logging.sinks[0].fiel");
  EXPECT_CONTAINS(error("logging.sinks=[{type: test_tally, fiel: x.txt}]"), "did you mean file");
  EXPECT_CONTAINS(error("data.batch_ops=[{type: test_scale, factor: -1}]"),
                  "--set data.batch_ops[0].factor: expected a positive number, got \"-1\"");
  EXPECT_CONTAINS(error("data.batch_ops=[{type: test_scal}]"), "test_scale");
}

}  // namespace
}  // namespace stoker
