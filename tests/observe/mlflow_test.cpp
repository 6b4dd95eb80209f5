// The MLflow sink (observe/mlflow.h). Without a server (suite MlflowSink): a server that is down or
// hangs never slows the training thread; the bounded queue drops the oldest records and counts them;
// one warning; end() returns within its bound and says what was not sent; the params, the tracking
// URI check and the log-batch JSON. With a real `mlflow server` from the libtorch venv (suite
// MlflowPython, label python; skipped, saying why, without it): a training run read back with MLflow's
// own client (tests/observe/mlflow_read.py) holds metrics.jsonl's values at their steps, the config as
// params, its artifacts and status FINISHED; a server killed mid-run leaves training going and the
// unsent count in the log.
#include "observe/mlflow.h"
#include "observe/sinks.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <regex>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "observe/metrics_file.h"
#include "recipe/run.h"
#include "test_config.h"

namespace stoker {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using testing::TempDir;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Polls `done` every 10 ms for at most `seconds`; returns its last answer.
template <typename F>
bool wait_for(F done, double seconds) {
  const auto start = Clock::now();
  while (!done() && seconds_since(start) < seconds) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return done();
}

int64_t count_of(const std::string& text, const std::string& part) {
  int64_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++n;
  return n;
}

// A socket on a free port of 127.0.0.1. listening: connections open (the kernel completes them) but
// are never accepted, so no request is answered: a hung server. Not listening: bound only, so a
// connection is refused: a server that is down.
class LocalPort {
 public:
  explicit LocalPort(bool listening) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port_ = ntohs(addr.sin_port);
    if (listening) EXPECT_EQ(::listen(fd_, 64), 0);
  }
  ~LocalPort() { ::close(fd_); }
  std::string uri() const { return fmt::format("http://127.0.0.1:{}", port_); }
  int port() const { return port_; }

 private:
  int fd_;
  int port_ = 0;
};

StepRecord step_record(int64_t step) {  // four scalars: train/loss, train/lr, train/samples_per_s, train/data_wait
  StepRecord r;
  r.step = step;
  r.loss = 1.0 / static_cast<double>(step);
  r.lr = 0.1;
  r.samples_per_s = 100;
  return r;
}

MlflowOptions quick_options(const std::string& uri) {
  MlflowOptions options;
  options.set_tracking_uri(uri).set_timeouts(1, 1.5).set_retry(0.05, 0.2).set_end_wait_s(1);
  return options;
}

TEST(MlflowSink, DownServerDropsTheOldestRecordsWarnsOnceAndEndSaysWhatWasNotSent) {
  TempDir dir;
  attach_log_file(dir / "log.txt");
  std::string uri;
  {
    const LocalPort closed(false);
    uri = closed.uri();
  }
  MlflowOptions options = quick_options(uri).set_max_queued_records(3);
  options.params = {{"a", "1"}, {"b", "2"}};
  MlflowSink sink(options);
  ASSERT_TRUE(wait_for([&] { return sink.tally().failures >= 2; }, 20)) << "the sender did not try again";
  const auto start = Clock::now();
  for (int64_t step = 1; step <= 10; ++step) sink.step(step_record(step));
  EXPECT_LT(seconds_since(start), 0.5) << "queuing 10 records waited on something";
  const auto ending = Clock::now();
  sink.end({});
  EXPECT_LT(seconds_since(ending), 1 + 2.5) << "end() waited past its bound";

  const MlflowSink::Tally t = sink.tally();
  EXPECT_EQ(t.metrics, 40);
  EXPECT_EQ(t.dropped_metrics, 28);  // 7 of the 10 records
  EXPECT_EQ(t.sent_metrics, 0);
  EXPECT_EQ(t.sent_params, 0);
  EXPECT_TRUE(t.run_id.empty());
  EXPECT_FALSE(t.status_sent);
  const std::string log = testing::read_bytes(dir / "log.txt");
  EXPECT_EQ(count_of(log, "is not answering"), 1) << log;
  EXPECT_CONTAINS(log, "MLflow at " + uri + " is not answering: ");
  EXPECT_CONTAINS(log, "; training goes on; metrics are kept for retry up to 3 records");
  EXPECT_EQ(count_of(log, "not sent:"), 1) << log;
  EXPECT_CONTAINS(log, "[warning] MLflow at " + uri + ": not sent: 40 of 40 metric values (28 dropped when the "
                       "queue of 3 records was full, 12 unsent at the end), 2 of 2 params, the run's end status "
                       "FINISHED; the run was never created; training was not affected");
}

TEST(MlflowSink, HungServerNeverSlowsTheTrainingThreadAndEndIsBounded) {
  TempDir dir;
  attach_log_file(dir / "log.txt");
  const LocalPort hung(true);
  MlflowSink sink(quick_options(hung.uri()));
  const auto start = Clock::now();
  for (int64_t step = 1; step <= 500; ++step) sink.step(step_record(step));
  EXPECT_LT(seconds_since(start), 0.5) << "queuing 500 records waited on the server";
  ASSERT_TRUE(wait_for([&] { return sink.tally().failures >= 1; }, 20)) << "no request timed out";
  const auto ending = Clock::now();
  sink.end({});
  EXPECT_LT(seconds_since(ending), 1 + 2.5) << "end() waited past its bound";
  const MlflowSink::Tally t = sink.tally();
  EXPECT_EQ(t.metrics, 2000);
  EXPECT_EQ(t.dropped_metrics, 0);
  EXPECT_EQ(t.sent_metrics, 0);
  const std::string log = testing::read_bytes(dir / "log.txt");
  EXPECT_EQ(count_of(log, "is not answering"), 1) << log;
  EXPECT_CONTAINS(log, "timed out");
  EXPECT_CONTAINS(log, "not sent: 2000 of 2000 metric values (2000 unsent at the end)");
}

TEST(MlflowSink, TrackingUriMustBeAnHttpAddress) {
  EXPECT_CONTAINS(testing::error_of([] { MlflowSink sink(MlflowOptions().set_tracking_uri("localhost:5000")); }),
                  "the MLflow tracking URI is 'localhost:5000'; expected the http:// or https:// address of an "
                  "MLflow tracking server");
}

TEST(MlflowSink, ParamsAreTheConfigFlattened) {
  const std::string yaml = "run: {name: tiny, seed: 7}\n"
                           "data:\n  mean: [0.5, 0.25]\n  train_transforms:\n    - {type: horizontal_flip, p: 0.5}\n"
                           "  eval_transforms: []\n"
                           "long: " + std::string(600, 'x') + "\n";
  const MlflowKeyValues want = {{"run.name", "tiny"},
                                {"run.seed", "7"},
                                {"data.mean", "[0.5, 0.25]"},
                                {"data.train_transforms", "[{type: horizontal_flip, p: 0.5}]"},
                                {"data.eval_transforms", "[]"},
                                {"long", std::string(497, 'x') + "..."}};
  EXPECT_EQ(flatten_params(yaml), want);
}

TEST(MlflowSink, LogBatchJsonSpellsNonFiniteValuesAsMlflowDoes) {
  const double inf = std::numeric_limits<double>::infinity();
  const Json body = Json::parse(mlflow_log_batch_json(
      "r1", {{"a", 0.5, 1000, 3}, {"b", std::nan(""), 1000, 3}, {"c", inf, 1, 4}, {"d", -inf, 1, 4}}, {{"k", "v"}}));
  EXPECT_EQ(body["run_id"], "r1");
  EXPECT_EQ(body["metrics"][0], Json({{"key", "a"}, {"value", 0.5}, {"timestamp", 1000}, {"step", 3}}));
  EXPECT_EQ(body["metrics"][1]["value"], "NaN");
  EXPECT_EQ(body["metrics"][2]["value"], "Infinity");
  EXPECT_EQ(body["metrics"][3]["value"], "-Infinity");
  EXPECT_EQ(body["params"], Json::parse(R"([{"key": "k", "value": "v"}])"));
}

// ---- against a real MLflow server --------------------------------------------------------------------

// `mlflow server` on a free port of 127.0.0.1, its store (SQLite) and artifacts under `dir`, its output
// in dir/server.log; in a process group of its own, which stop() (and the destructor) ends: SIGTERM,
// SIGKILL after 10 s, waitpid.
class MlflowServer {
 public:
  MlflowServer(const fs::path& mlflow, const fs::path& dir) {
    port_ = LocalPort(false).port();
    log_ = dir / "server.log";
    std::vector<std::string> args = {mlflow.string(), "server", "--host", "127.0.0.1", "--port",
                                     std::to_string(port_), "--workers", "1", "--backend-store-uri",
                                     "sqlite:///" + (dir / "mlflow.db").string(),
                                     "--serve-artifacts", "--artifacts-destination", (dir / "artifacts").string()};
    std::vector<std::string> env = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false"};  // no job runner processes
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
    std::vector<char*> argv, envp;  // made before fork: the child only calls async-signal-safe functions
    for (std::string& a : args) argv.push_back(a.data());
    for (std::string& e : env) envp.push_back(e.data());
    argv.push_back(nullptr);
    envp.push_back(nullptr);
    const int out = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      ::dup2(out, 1);
      ::dup2(out, 2);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    if (pid_ > 0) ::setpgid(pid_, pid_);  // as the child does: whichever runs first
    ::close(out);
  }
  ~MlflowServer() { stop(std::chrono::seconds(10)); }
  MlflowServer(const MlflowServer&) = delete;
  MlflowServer& operator=(const MlflowServer&) = delete;

  std::string uri() const { return fmt::format("http://127.0.0.1:{}", port_); }

  // Whether the server answers a REST call within `seconds`; `why` says why not.
  bool wait_until_up(double seconds, std::string* why) {
    MlflowRest rest(uri(), {0.5, 2}, {});
    const auto start = Clock::now();
    while (seconds_since(start) < seconds) {
      int status = 0;
      if (pid_ <= 0 || ::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        *why = "mlflow server exited at once; its output:\n" + testing::read_bytes(log_);
        return false;
      }
      try {
        rest.experiment_id("Default");
        return true;
      } catch (const MlflowCallFailed&) {
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
      }
    }
    *why = fmt::format("mlflow server did not answer within {} s; its output:\n{}", seconds, testing::read_bytes(log_));
    return false;
  }

  // Ends the whole process group: SIGTERM, then SIGKILL after `grace`; reaps the server.
  void stop(std::chrono::milliseconds grace) {
    if (pid_ <= 1) return;  // never kill(-1) or kill(0)
    ::kill(-pid_, grace.count() > 0 ? SIGTERM : SIGKILL);
    const auto start = Clock::now();
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() - start > grace) {
        ::kill(-pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ::kill(-pid_, SIGKILL);  // workers the server left behind
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  fs::path log_;
};

class MlflowPython : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    python_ = testing::venv_python(&why);
    if (python_.empty()) GTEST_SKIP() << why << ", and mlflow with `bash bench/setup.sh`";
    const fs::path mlflow = python_.parent_path() / "mlflow";
    if (!fs::exists(mlflow) || testing::shell("'" + python_.string() + "' -c 'import mlflow' >/dev/null 2>&1") != 0) {
      GTEST_SKIP() << "mlflow is not installed in " << python_.parent_path().parent_path().string()
                   << "; install it with `bash bench/setup.sh`";
    }
    script_ = fs::path(STOKER_SOURCE_DIR) / "tests/observe/mlflow_read.py";
    ASSERT_TRUE(fs::exists(script_)) << script_;
    server_ = std::make_unique<MlflowServer>(mlflow, dir_.path());
    ASSERT_TRUE(server_->wait_until_up(240, &why)) << why;
  }

  // The runs of `experiment` as mlflow_read.py writes them.
  Json read_runs(const std::string& experiment) {
    const fs::path out = dir_ / "runs.json", log = dir_ / "read.log";
    const int status = testing::shell(fmt::format("'{}' '{}' '{}' '{}' '{}' >'{}' 2>&1", python_.string(),
                                                  script_.string(), server_->uri(), experiment, out.string(),
                                                  log.string()));
    EXPECT_EQ(status, 0) << testing::read_bytes(log);
    return status == 0 ? Json::parse(testing::read_bytes(out))["runs"] : Json::array();
  }

  TrainRequest request(const fs::path& data, const fs::path& runs, int64_t train_samples, int64_t epochs) {
    testing::write_synthetic_idx_dataset(data, train_samples, 64, 12);
    TrainRequest r;
    r.config = testing::tiny_config(data, runs);
    r.config.train.epochs = epochs;
    r.config.train.log_every_steps = 2;
    TypedOptions mlflow = make_sink_options("mlflow");
    mlflow.as<MlflowSinkOptions>().tracking_uri = server_->uri();
    r.config.logging.sinks = {make_sink_options("metrics_file"), make_sink_options("console"), mlflow};
    return r;
  }

  TempDir dir_;  // declared before server_: the server stops before its folder goes
  fs::path python_, script_;
  std::unique_ptr<MlflowServer> server_;
};

// MLflow's history of each metric by step, as metrics.jsonl has it: {tag: {step: value}}.
std::map<std::string, std::map<int64_t, double>> expected_metrics(const fs::path& run_dir) {
  const std::vector<std::pair<std::string, std::string>> step_keys = {
      {"train/loss", "loss"},
      {"train/lr", "lr"},
      {"train/samples_per_s", "samples_per_s"},
      {"train/data_wait", "data_wait"}};
  const std::vector<std::pair<std::string, std::string>> epoch_keys = {
      {"train/epoch_loss", "train_loss"}, {"test/loss", "test_loss"}, {"test/top1", "test_top1"},
      {"test/top5", "test_top5"}, {"epoch/seconds", "epoch_seconds"}, {"data/read_s", "data_read_s"}};
  std::map<std::string, std::map<int64_t, double>> want;
  for (const MetricsRecord& line : read_metrics_file(run_dir / "metrics.jsonl")) {
    const bool step = line.strings.at("kind") == "step";
    const auto at = static_cast<int64_t>(line.numbers.at("step"));
    for (const auto& [tag, key] : step ? step_keys : epoch_keys) want[tag][at] = line.numbers.at(key);
  }
  return want;
}

TEST_F(MlflowPython, TrainingRunReadBackWithMlflowsClientHoldsMetricsParamsArtifactsAndStatus) {
  TempDir data, runs;
  const TrainOutcome out = run_training(request(data.path(), runs.path(), 128, 2));
  const Json found = read_runs("tiny");  // the mlflow sink's experiment defaults to run.name
  ASSERT_EQ(found.size(), 1u) << found.dump();
  const Json& run = found[0];
  EXPECT_EQ(run["status"], "FINISHED");
  EXPECT_EQ(run["run_name"], "tiny/" + out.run_dir.filename().string());

  for (const auto& [tag, steps] : expected_metrics(out.run_dir)) {
    ASSERT_TRUE(run["metrics"].contains(tag)) << "MLflow has no metric " << tag;
    const Json& history = run["metrics"][tag];
    ASSERT_EQ(history.size(), steps.size()) << tag << ": " << history.dump();
    for (const Json& point : history) {
      const auto step = point[0].get<int64_t>();
      ASSERT_TRUE(steps.count(step)) << tag << " at step " << step << " is not in metrics.jsonl";
      EXPECT_DOUBLE_EQ(point[1].get<double>(), steps.at(step)) << tag << " at step " << step;
    }
  }

  const std::string config_yaml = testing::read_bytes(out.run_dir / "config.yaml");
  const MlflowKeyValues params = flatten_params(config_yaml);
  EXPECT_EQ(run["params"].size(), params.size());
  for (const auto& [key, value] : params) EXPECT_EQ(run["params"].value(key, "(missing)"), value) << key;
  EXPECT_EQ(run["params"].value("run.name", ""), "tiny");
  EXPECT_EQ(run["params"].value("train.epochs", ""), "2");
  EXPECT_EQ(run["tags"].value("stoker.device", ""), "cpu");
  EXPECT_EQ(run["tags"].value("stoker.run_dir", ""), out.run_dir.string());
  EXPECT_TRUE(run["tags"].contains("stoker.commit")) << run["tags"].dump();

  std::vector<std::string> artifacts = run["artifacts"].get<std::vector<std::string>>();
  std::sort(artifacts.begin(), artifacts.end());
  EXPECT_EQ(artifacts, (std::vector<std::string>{"config.yaml", "environment.json", "report.html"}));
  EXPECT_EQ(run["config_yaml"], config_yaml);
  const std::string log = testing::read_bytes(out.run_dir / "train.log");
  EXPECT_CONTAINS(log, "MLflow: run " + run["run_id"].get<std::string>());
  EXPECT_EQ(count_of(log, "not answering"), 0) << log;
}

// The step lines of the first metrics.jsonl under `runs`.
int64_t logged_steps(const fs::path& runs) {
  std::error_code error;
  for (auto it = fs::recursive_directory_iterator(runs, error); !error && it != fs::recursive_directory_iterator();
       it.increment(error)) {
    if (it->path().filename() == "metrics.jsonl") return count_of(testing::read_bytes(it->path()), "\"kind\":\"step\"");
  }
  return 0;
}

TEST_F(MlflowPython, ServerKilledMidRunTrainingGoesOnWarnsOnceAndSaysWhatWasNotSent) {
  TempDir data, runs;
  const TrainRequest r = request(data.path(), runs.path(), 2048, 25);  // 1600 steps, a record every 2
  // The server is killed once a first log-batch is in its store (its SQLite file, read by the venv's
  // Python), while training goes on for seconds more.
  const std::string metrics_stored =
      fmt::format("'{}' -c \"import sqlite3, sys; db = sqlite3.connect('file:{}?mode=ro', uri=True); "
                  "sys.exit(db.execute('select count(*) from metrics').fetchone()[0] < 4)\" >/dev/null 2>&1",
                  python_.string(), (dir_ / "mlflow.db").string());
  std::atomic<int64_t> steps_at_kill{-1};
  std::atomic<bool> stop{false};
  std::thread killer([&] {
    if (!wait_for([&] { return stop || testing::shell(metrics_stored) == 0; }, 600) || stop) return;
    server_->stop(std::chrono::milliseconds(0));  // SIGKILL: the server dies as in a crash
    steps_at_kill = logged_steps(runs.path());
  });
  TrainOutcome out;
  try {
    out = run_training(r);
  } catch (...) {
    stop = true;
    killer.join();
    throw;
  }
  stop = true;
  killer.join();
  ASSERT_GE(steps_at_kill, 1) << "training ended before the server stored a metric";
  EXPECT_EQ(out.fit.epochs.size(), 25u);
  EXPECT_GT(logged_steps(runs.path()), steps_at_kill + 10) << "training ended right after the server was killed";

  const std::string uri = server_->uri(), log = testing::read_bytes(out.run_dir / "train.log");
  EXPECT_EQ(count_of(log, "is not answering"), 1) << log;
  EXPECT_CONTAINS(log, "MLflow at " + uri + " is not answering: ");
  EXPECT_EQ(count_of(log, ": not sent: "), 1) << log;
  std::smatch unsent;
  ASSERT_TRUE(std::regex_search(log, unsent, std::regex("not sent: ([0-9]+) of ([0-9]+) metric values"))) << log;
  EXPECT_GT(std::stoll(unsent[1]), 0);
  EXPECT_LT(std::stoll(unsent[1]), std::stoll(unsent[2])) << "nothing was sent before the kill";
  EXPECT_CONTAINS(log, "the run's end status FINISHED; run ");
}

}  // namespace
}  // namespace stoker
