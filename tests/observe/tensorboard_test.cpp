// TensorBoard event files: CRC-32C against published vectors, the Event wire bytes, write errors,
// and (suite TensorBoardPython) TensorBoard's own EventAccumulator reading what the callback wrote,
// and its record reader rejecting a corrupted record by its CRC; run_training wiring it in (event
// file, FLOPs and MFU in metrics.jsonl, environment.json), read back by TensorBoard too.
#include "observe/sinks.h"
#include "observe/tensorboard.h"

#include <unistd.h>

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "test_config.h"
#include "recipe/run.h"

namespace stoker {
namespace {
namespace fs = std::filesystem;
using stoker::testing::TempDir;

TEST(Crc32c, KnownVectors) {
  const std::string check = "123456789";
  EXPECT_EQ(crc32c(check.data(), check.size()), 0xE3069283u);  // the CRC catalogue's check value
  EXPECT_EQ(crc32c("", 0), 0u);
  // RFC 3720 (iSCSI), appendix B.4.
  std::string zeros(32, '\0'), ones(32, '\xFF'), ascending(32, '\0'), descending(32, '\0');
  for (int i = 0; i < 32; ++i) {
    ascending[i] = static_cast<char>(i);
    descending[i] = static_cast<char>(31 - i);
  }
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(crc32c(ascending.data(), ascending.size()), 0x46DD794Eu);
  EXPECT_EQ(crc32c(descending.data(), descending.size()), 0x113FDB5Cu);
  // Continuing a CRC over a second piece equals the CRC of the whole.
  EXPECT_EQ(crc32c(check.data() + 4, 5, crc32c(check.data(), 4)), 0xE3069283u);
  // The mask: rotate right by 15, add 0xa282ead8.
  const uint32_t c = 0xE3069283u;
  EXPECT_EQ(masked_crc32c(check.data(), check.size()), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

std::string hex(const std::string& bytes) {
  std::string out;
  for (unsigned char b : bytes) out += fmt::format("{:02x}", b);
  return out;
}

TEST(TensorBoardEncoding, ScalarEventWireBytes) {
  // Event{wall_time: 1.5, step: 3, summary{value{tag: "a", simple_value: 2}}}, encoded by hand:
  // 09 <double 1.5> | 10 03 | 2a 0a [ 0a 08 [ 0a 01 'a' | 15 <float 2> ] ]
  EXPECT_EQ(hex(encode_scalars_event(1.5, 3, {{"a", 2.0}})),
            "09000000000000f83f" "1003" "2a0a" "0a08" "0a0161" "1500000040");
  // A step of 0 is left out (proto3), a large one is a multi-byte varint (300 = ac 02).
  EXPECT_EQ(hex(encode_scalars_event(0.0, 300, {})), "090000000000000000" "10ac02" "2a00");
  // file_version = 3; session_log = 7: SessionLog{status: START} = { 08 01 }.
  EXPECT_EQ(hex(encode_file_version_event(0.0)), "090000000000000000" "1a0d" + hex("brain.Event:2"));
  EXPECT_EQ(hex(encode_session_start_event(0.0, 7)), "090000000000000000" "1007" "3a020801");
  // TFRecord framing: length, masked CRC of the length, data, masked CRC of the data.
  const std::string framed = tfrecord_frame("abc");
  ASSERT_EQ(framed.size(), 8u + 4 + 3 + 4);
  EXPECT_EQ(hex(framed.substr(0, 8)), "0300000000000000");
  EXPECT_EQ(framed.substr(12, 3), "abc");
  uint32_t data_crc = 0;
  for (int i = 0; i < 4; ++i) data_crc |= static_cast<uint32_t>(static_cast<unsigned char>(framed[15 + i])) << (8 * i);
  EXPECT_EQ(data_crc, masked_crc32c("abc", 3));
}

TEST(TensorBoardEncoding, GpuIdleOnlyWhenMeasured) {
  StepRecord r;
  const auto has_idle = [](const std::vector<Scalar>& scalars) {
    for (const Scalar& s : scalars) {
      if (s.tag == "train/gpu_idle") return s.value;
    }
    return -1.0;
  };
  EXPECT_EQ(has_idle(scalars_of(r)), -1.0);
  r.gpu_idle = 0.25;
  EXPECT_EQ(has_idle(scalars_of(r)), 0.25);
}

TEST(TensorBoardWriter, FileNamesAndWriteErrors) {
  TempDir dir;
  const fs::path a = new_event_file_path(dir / "run/tb");
  EXPECT_TRUE(fs::is_directory(dir / "run/tb"));
  EXPECT_EQ(a.filename().string().rfind("events.out.tfevents.", 0), 0u) << a;
  {
    EventFileWriter writer(a);
    writer.add_scalars(1, {{"x", 1.0}});
    writer.close();
    EXPECT_CONTAINS(testing::error_of([&] { writer.add_scalars(2, {{"x", 2.0}}); }), "closed already");
  }
  // The same second: a suffix, never the existing file.
  const fs::path b = new_event_file_path(dir / "run/tb");
  EXPECT_NE(a, b);
  EXPECT_GT(fs::file_size(a), 0u);
  // A full disk: the error names the file.
  EXPECT_CONTAINS(testing::error_of([] { EventFileWriter full("/dev/full"); }), "/dev/full");
}

// ---- wired into run_training -------------------------------------------------------------------------

// One short epoch on the synthetic data (4 steps of 32, logged every 3 steps), with an EMA.
TrainOutcome train_one_epoch(const fs::path& data, const fs::path& runs, bool tensorboard) {
  testing::write_synthetic_idx_dataset(data, 128, 64, 12);
  TrainRequest request;
  request.config = testing::tiny_config(data, runs);
  request.config.train.epochs = 1;
  request.config.train.log_every_steps = 3;
  request.config.train.ema_decay = 0.9;
  if (!tensorboard) request.config.logging.sinks = {make_sink_options("metrics_file"), make_sink_options("console")};
  return run_training(request);
}

// The first line of metrics.jsonl of `kind` ("step" or "epoch").
std::string metrics_line(const fs::path& run_dir, const std::string& kind) {
  std::ifstream in(run_dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"kind\":\"" + kind + "\"") != std::string::npos) return line;
  }
  ADD_FAILURE() << "no " << kind << " line in " << (run_dir / "metrics.jsonl");
  return "";
}

double json_number(const std::string& line, const std::string& key) {
  const auto at = line.find("\"" + key + "\":");
  if (at == std::string::npos) {
    ADD_FAILURE() << "no " << key << " in " << line;
    return std::nan("");
  }
  return std::stod(line.substr(at + key.size() + 3));
}

TEST(RunObservability, TrainingWritesEventFileEnvironmentAndFlops) {
  TempDir data, runs;
  const TrainOutcome out = train_one_epoch(data.path(), runs.path(), true);
  std::vector<fs::path> events;
  for (const auto& entry : fs::directory_iterator(out.run_dir / "tb")) events.push_back(entry.path());
  ASSERT_EQ(events.size(), 1u);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string name = events[0].filename().string();
  EXPECT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;
  EXPECT_EQ(name.substr(name.size() - std::string(host).size()), host) << name;
  EXPECT_GT(fs::file_size(events[0]), 200u);
  // FLOPs counted at start: TFLOP/s and MFU (against the CPU's measured peak) in both kinds of line.
  for (const char* kind : {"step", "epoch"}) {
    const std::string line = metrics_line(out.run_dir, kind);
    const double tflops = json_number(line, "tflops"), mfu = json_number(line, "mfu");
    EXPECT_GT(tflops, 0) << line;
    EXPECT_GT(mfu, 0) << line;
    EXPECT_LT(mfu, 1) << line;
    // tflops = samples/s x the model's training FLOPs per sample: the same ratio in every line.
    EXPECT_GT(tflops * 1e12 / json_number(line, "samples_per_s"), 1e5) << line;
  }
  EXPECT_CONTAINS(testing::read_bytes(out.run_dir / "train.log"), "MFU ");
  const std::string environment = testing::read_bytes(out.run_dir / "environment.json");
  EXPECT_CONTAINS(environment, "\"torch\":\"" TORCH_VERSION "\"");
  EXPECT_CONTAINS(environment, "\"device\":\"cpu\"");
  EXPECT_CONTAINS(environment, "\"stoker_commit\":");
}

TEST(RunObservability, TensorBoardOffWritesNoEventFile) {
  TempDir data, runs;
  const TrainOutcome out = train_one_epoch(data.path(), runs.path(), false);
  EXPECT_FALSE(fs::exists(out.run_dir / "tb"));
  EXPECT_TRUE(fs::exists(out.run_dir / "metrics.jsonl"));
}

// ---- read back by TensorBoard ------------------------------------------------------------------------

using Series = std::map<std::string, std::map<int64_t, double>>;  // tag -> step -> value

StepInfo fake_step(int64_t epoch, int64_t batch, int64_t batches) {
  StepInfo s;
  s.epoch = epoch;
  s.batch = batch;
  s.batches = batches;
  s.step = epoch * batches + batch + 1;
  s.loss = torch::tensor(1.0 / static_cast<double>(s.step));
  s.samples = 8;
  s.lr = 0.1 * static_cast<double>(s.step);
  s.data_seconds = 0.1;
  s.step_seconds = 0.5 * static_cast<double>(s.step);
  return s;
}

EpochResult fake_epoch(int64_t epoch) {
  EpochResult r;
  r.epoch = epoch;
  r.train_loss = 2.0 - static_cast<double>(epoch);
  r.train_top1 = 0.5 + 0.25 * static_cast<double>(epoch);
  r.test = {0.75 - 0.25 * static_cast<double>(epoch), 0.5 + 0.125 * static_cast<double>(epoch), 0.875, 100};
  if (epoch == 1) r.ema_test = {0.375, 0.6875, 0.9375, 100};
  r.seconds = 12.5;
  r.samples_per_s = 1000.0 + static_cast<double>(epoch);
  r.data_wait = 0.25;
  r.stages.read = 1.5;
  r.stages.decode = 2.5;
  r.stages.transform = 0.5;
  r.stages.copy = 0.25;
  r.stages.bad_samples = 2;
  return r;
}

class TensorBoardPython : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    python_ = testing::venv_python(&why);
    if (python_.empty()) GTEST_SKIP() << why << ", and tensorboard with `bash bench/setup.sh`";
    if (testing::shell("'" + python_.string() + "' -c 'import tensorboard' >/dev/null 2>&1") != 0) {
      GTEST_SKIP() << "tensorboard is not installed in " << python_.string()
                   << "; install it with `bash bench/setup.sh`";
    }
    script_ = fs::path(STOKER_SOURCE_DIR) / "tests/observe/tensorboard_read.py";
    ASSERT_TRUE(fs::exists(script_)) << script_;
  }

  // Runs the reader script; returns its exit status, with its output in `output`.
  int read(const std::string& args, std::string* output) {
    const fs::path log = dir_ / "read.log";
    const int status = testing::shell("'" + python_.string() + "' '" + script_.string() + "' " + args +
                                      " >'" + log.string() + "' 2>&1");
    *output = testing::read_bytes(log);
    return status;
  }

  Series scalars(const fs::path& folder) {
    const fs::path out = dir_ / "scalars.txt";
    std::string log;
    EXPECT_EQ(read("scalars '" + folder.string() + "' '" + out.string() + "'", &log), 0) << log;
    Series series;
    std::ifstream in(out);
    std::string tag;
    int64_t step = 0;
    double value = 0;
    while (in >> tag >> step >> value) {
      EXPECT_EQ(series[tag].count(step), 0u) << tag << " twice at step " << step;
      series[tag][step] = value;
    }
    return series;
  }

  // Logs 2 epochs of 3 batches (steps 1..6) every 2 steps: logged at steps 2, 3 (end of epoch), 4, 6,
  // through the MetricsLogger into a TensorBoard sink, with the readings a CUDA run takes: the GPU
  // idle share (0.125 per logged step) and the loss scaler's.
  static void log_two_epochs(MetricsLogger& metrics, int64_t first_epoch = 0) {
    int64_t logged = 0;
    for (int64_t e = first_epoch; e < 2; ++e) {
      for (int64_t b = 0; b < 3; ++b) {
        const StepInfo s = fake_step(e, b, 3);
        StepReadings readings;
        readings.gpu_idle = 0.125 * static_cast<double>(logged + 1);
        readings.loss_scale = 1024.0 * static_cast<double>(s.step);
        readings.skipped_steps = s.step / 3;
        if (metrics.log_step(s, 2, 6, readings)) ++logged;
      }
      metrics.log_epoch(fake_epoch(e), 2, (e + 1) * 3, true);
    }
  }

  TempDir dir_;
  fs::path python_, script_;
};

void expect_series(const Series& got, const Series& want) {
  for (const auto& [tag, steps] : want) {
    ASSERT_TRUE(got.count(tag)) << "TensorBoard found no tag " << tag;
    const auto& found = got.at(tag);
    ASSERT_EQ(found.size(), steps.size()) << tag;
    for (const auto& [step, value] : steps) {
      ASSERT_TRUE(found.count(step)) << tag << " has no step " << step;
      // float32 storage: about 6e-8 relative.
      EXPECT_NEAR(found.at(step), value, 1e-6 * std::max(1.0, std::abs(value))) << tag << " at step " << step;
    }
  }
  for (const auto& [tag, steps] : got) EXPECT_TRUE(want.count(tag)) << "unexpected tag " << tag;
}

TEST_F(TensorBoardPython, EventAccumulatorReadsEveryTagStepAndValue) {
  const fs::path tb = dir_ / "run/tb";
  int64_t samples_taken = 0;
  {
    MetricsOptions options;
    options.set_log_every_steps(2).set_flops(3e9, 1e11).set_telemetry([&] {
      GpuSample sample;
      sample.utilization = 50.0 + static_cast<double>(++samples_taken);
      return std::optional<GpuSample>(sample);
    });
    MetricsLogger metrics(options);
    auto sink = std::make_shared<TensorBoardSink>(tb);
    metrics.add_sink(sink);
    log_two_epochs(metrics);
    sink->end({});
  }
  EXPECT_EQ(samples_taken, 4);
  // The windows: step 2 = steps 1-2 (1.5 s, 16 samples), step 3 = step 3 (1.5 s), step 4 = step 4
  // (2 s; the epoch start reset the window), step 6 = steps 5-6 (5.5 s); 0.1 s data wait each.
  const std::map<int64_t, double> sps = {{2, 16 / 1.5}, {3, 8 / 1.5}, {4, 8 / 2.0}, {6, 16 / 5.5}};
  Series want;
  for (const auto& [step, rate] : sps) {
    const double n = static_cast<double>(step);
    want["train/loss"][step] = 1.0 / n;
    want["train/lr"][step] = 0.1 * n;
    want["train/samples_per_s"][step] = rate;
    want["train/loss_scale"][step] = 1024.0 * n;
    want["train/skipped_steps"][step] = static_cast<double>(step / 3);
    want["perf/tflops"][step] = rate * 3e9 / 1e12;
    want["perf/mfu"][step] = rate * 3e9 / 1e11;
  }
  want["train/data_wait"] = {{2, 0.2 / 1.5}, {3, 0.1 / 1.5}, {4, 0.1 / 2.0}, {6, 0.2 / 5.5}};
  want["gpu/utilization"] = {{2, 51}, {3, 52}, {4, 53}, {6, 54}};
  for (const char* zero : {"gpu/memory_used_gib", "gpu/power_w", "gpu/temperature_c", "gpu/sm_clock_mhz"}) {
    want[zero] = {{2, 0}, {3, 0}, {4, 0}, {6, 0}};
  }
  want["train/gpu_idle"] = {{2, 0.125}, {3, 0.25}, {4, 0.375}, {6, 0.5}};
  want["train/epoch_loss"] = {{3, 2.0}, {6, 1.0}};
  want["train/epoch_top1"] = {{3, 0.5}, {6, 0.75}};
  want["test/loss"] = {{3, 0.75}, {6, 0.5}};
  want["test/top1"] = {{3, 0.5}, {6, 0.625}};
  want["test/top5"] = {{3, 0.875}, {6, 0.875}};
  want["ema_test/loss"] = {{6, 0.375}};
  want["ema_test/top1"] = {{6, 0.6875}};
  want["ema_test/top5"] = {{6, 0.9375}};
  want["epoch/epoch"] = {{3, 1}, {6, 2}};
  want["epoch/seconds"] = {{3, 12.5}, {6, 12.5}};
  want["epoch/samples_per_s"] = {{3, 1000}, {6, 1001}};
  want["epoch/data_wait"] = {{3, 0.25}, {6, 0.25}};
  want["epoch/tflops"] = {{3, 1000 * 3e9 / 1e12}, {6, 1001 * 3e9 / 1e12}};
  want["epoch/mfu"] = {{3, 1000 * 3e9 / 1e11}, {6, 1001 * 3e9 / 1e11}};
  want["data/read_s"] = {{3, 1.5}, {6, 1.5}};
  want["data/decode_s"] = {{3, 2.5}, {6, 2.5}};
  want["data/transform_s"] = {{3, 0.5}, {6, 0.5}};
  want["data/copy_s"] = {{3, 0.25}, {6, 0.25}};
  want["data/bad_samples"] = {{3, 2}, {6, 2}};
  expect_series(scalars(tb), want);
}

TEST_F(TensorBoardPython, ResumedRunReplacesTheEventsAfterItsCheckpoint) {
  const fs::path tb = dir_ / "run/tb";
  {
    MetricsLogger first(MetricsOptions().set_log_every_steps(2));
    first.add_sink(std::make_shared<TensorBoardSink>(tb));
    log_two_epochs(first);
  }
  {
    // Resumed from the checkpoint at the end of epoch 1 (step 3): a second file in the same folder.
    MetricsLogger second(MetricsOptions().set_log_every_steps(2));
    second.add_sink(std::make_shared<TensorBoardSink>(tb));
    second.start(3);
    for (int64_t b = 0; b < 3; ++b) {
      StepInfo s = fake_step(1, b, 3);
      s.loss = torch::tensor(100.0 + static_cast<double>(s.step));
      second.log_step(s, 2, 6, {});
    }
  }
  const Series got = scalars(tb);
  // The first file's steps 4 and 6 are orphaned; step 3 (checkpointed) stays.
  const std::map<int64_t, double> want = {{2, 0.5}, {3, 1.0 / 3}, {4, 104.0}, {6, 106.0}};
  ASSERT_TRUE(got.count("train/loss"));
  ASSERT_EQ(got.at("train/loss").size(), want.size());
  for (const auto& [step, value] : want) EXPECT_NEAR(got.at("train/loss").at(step), value, 1e-6) << step;
  EXPECT_EQ(got.at("test/top1").size(), 1u) << "epoch 2 of the first file was orphaned";
  // No loss scaling in the resumed part: only the first file's steps before the checkpoint.
  ASSERT_TRUE(got.count("train/loss_scale"));
  EXPECT_EQ(got.at("train/loss_scale").size(), 2u);
}

TEST_F(TensorBoardPython, TrainingRunHasEveryTagWithMetricsValues) {
  TempDir data, runs;
  const TrainOutcome out = train_one_epoch(data.path(), runs.path(), true);
  const Series got = scalars(out.run_dir / "tb");
  // 128 samples / 32 = 4 optimizer steps, logged at steps 3 and 4 (the epoch's end).
  for (const char* tag : {"train/loss", "train/lr", "train/samples_per_s", "train/data_wait", "perf/tflops",
                          "perf/mfu"}) {
    ASSERT_TRUE(got.count(tag)) << "TensorBoard found no tag " << tag;
    EXPECT_EQ(got.at(tag).size(), 2u) << tag;
    EXPECT_TRUE(got.at(tag).count(3) && got.at(tag).count(4)) << tag;
  }
  const std::string epoch = metrics_line(out.run_dir, "epoch");
  const std::map<std::string, std::string> per_epoch = {
      {"test/loss", "test_loss"},         {"test/top1", "test_top1"},         {"test/top5", "test_top5"},
      {"ema_test/loss", "ema_test_loss"}, {"ema_test/top1", "ema_test_top1"}, {"ema_test/top5", "ema_test_top5"},
      {"train/epoch_loss", "train_loss"}, {"train/epoch_top1", "train_top1"}, {"epoch/tflops", "tflops"},         {"epoch/mfu", "mfu"},
      {"epoch/samples_per_s", "samples_per_s"}, {"data/read_s", "data_read_s"}};
  for (const auto& [tag, key] : per_epoch) {
    ASSERT_TRUE(got.count(tag)) << "TensorBoard found no tag " << tag;
    ASSERT_EQ(got.at(tag).size(), 1u) << tag;
    ASSERT_TRUE(got.at(tag).count(4)) << tag << " is not at the epoch's last step";
    const double want = json_number(epoch, key);  // float32 in the event file
    EXPECT_NEAR(got.at(tag).at(4), want, 1e-6 * std::max(1.0, std::abs(want))) << tag;
  }
  // The first logged step's loss and lr are metrics.jsonl's first step line's.
  const std::string step = metrics_line(out.run_dir, "step");
  // train/gpu_idle where metrics.jsonl has gpu_idle (CUDA), with its value; nowhere on the CPU.
  if (step.find("\"gpu_idle\":") != std::string::npos) {
    ASSERT_TRUE(got.count("train/gpu_idle")) << step;
    EXPECT_NEAR(got.at("train/gpu_idle").at(3), json_number(step, "gpu_idle"), 1e-6);
  } else {
    EXPECT_FALSE(got.count("train/gpu_idle")) << "gpu_idle is not measured on " << step;
  }
  EXPECT_NEAR(got.at("train/loss").at(3), json_number(step, "loss"), 1e-6);
  EXPECT_NEAR(got.at("train/lr").at(3), json_number(step, "lr"), 1e-7);
}

TEST_F(TensorBoardPython, RecordReaderRejectsACorruptedRecordByItsCrc) {
  const fs::path file = dir_ / "events.out.tfevents.1.test";
  {
    EventFileWriter writer(file);
    writer.add_scalars(1, {{"train/loss", 0.5}});
    writer.add_scalars(2, {{"train/loss", 0.25}});
  }
  std::string out;
  ASSERT_EQ(read("records '" + file.string() + "'", &out), 0) << out;
  EXPECT_CONTAINS(out, "records 3");  // file_version and two scalar events
  // Flip one byte in the data of the second record (after the first: 12 + data + 4 bytes).
  std::string bytes = testing::read_bytes(file);
  uint64_t first_length = 0;
  for (int i = 0; i < 8; ++i) first_length |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  const size_t second_data = 12 + first_length + 4 + 12;
  ASSERT_LT(second_data + 5, bytes.size());
  bytes[second_data + 5] = static_cast<char>(bytes[second_data + 5] ^ 0x01);
  testing::write_bytes(file, bytes);
  EXPECT_NE(read("records '" + file.string() + "'", &out), 0) << out;
  EXPECT_CONTAINS(out, "DataLossError after 1 records");
  EXPECT_CONTAINS(out, "failed event crc32 check");
}

}  // namespace
}  // namespace stoker
