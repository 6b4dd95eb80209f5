// MLflow: a MetricsSink that sends a run to an MLflow tracking server over its REST API
// (observe/mlflow_rest.h): the run's params (the resolved config, flattened), tags (Stoker's commit,
// the host, the device), every record's scalars (observe/metrics.h: train/loss, test/top1, ...) at
// its optimizer step, and at the end config.yaml, environment.json and report.html as artifacts and
// the run's status (FINISHED, KILLED when stopped, FAILED when fit() left by an exception).
//
// A server that is down or slow never stops or slows training. The training thread only appends a
// record to a bounded queue (oldest dropped and counted when it is full) and returns; one sender
// thread does all the talking: it creates the run, sends the params and then the metrics in
// log-batch calls, and retries what failed with a growing wait (retry_min_s doubling up to
// retry_max_s). The first failure is one warning; end() waits at most end_wait_s for the rest to go
// out, then gives up and says in one line what was not sent.
//
//   MlflowOptions options;
//   options.set_tracking_uri("http://127.0.0.1:5000").set_experiment("fashion_mnist");
//   options.params = flatten_params(config_yaml);
//   metrics->add_sink(std::make_shared<MlflowSink>(options));   // metrics: the run's MetricsLogger
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "observe/metrics.h"
#include "observe/mlflow_rest.h"

namespace stoker {

// A file sent at the end; `content` is called then, on the sender thread (it may read files that
// fit() finished writing). An exception from it leaves the artifact out, saying why in the log.
struct MlflowArtifact {
  std::string path;  // in the run's artifacts: "config.yaml"
  std::function<std::string()> content;
};

struct MlflowOptions {
  std::string tracking_uri;         // http(s)://host:port of `mlflow server`
  std::string experiment = "stoker";  // created when the server has none of that name
  std::string run_name;             // empty: the server picks one
  MlflowKeyValues params;           // sent first, kMlflowBatchParams per call
  MlflowKeyValues tags;             // set when the run is created
  std::vector<MlflowArtifact> artifacts;
  int64_t max_queued_records = 10000;  // records waiting to be sent; beyond it the oldest is dropped
  MlflowTimeouts timeouts;
  double retry_min_s = 0.5, retry_max_s = 30;  // the wait after a failed call, doubling
  double end_wait_s = 5;                       // end(): the longest wait for what is still queued

  MlflowOptions& set_tracking_uri(std::string v) { tracking_uri = std::move(v); return *this; }
  MlflowOptions& set_experiment(std::string v) { experiment = std::move(v); return *this; }
  MlflowOptions& set_run_name(std::string v) { run_name = std::move(v); return *this; }
  MlflowOptions& set_max_queued_records(int64_t v) { max_queued_records = v; return *this; }
  MlflowOptions& set_timeouts(double connect_s, double request_s) {
    timeouts = {connect_s, request_s};
    return *this;
  }
  MlflowOptions& set_retry(double min_s, double max_s) {
    retry_min_s = min_s;
    retry_max_s = max_s;
    return *this;
  }
  MlflowOptions& set_end_wait_s(double v) { end_wait_s = v; return *this; }
};

// Checks a tracking URI: http:// or https:// and a host. The error names `key` (the config key) and
// says what to give instead.
void check_mlflow_tracking_uri(const std::string& uri, const std::string& key);

// The longest param value MLflow takes everywhere (newer servers take more); longer ones are cut,
// ending in "...".
inline constexpr size_t kMlflowParamValueMax = 500;
// A YAML document (the resolved config) as params: "optimizer.lr" -> "0.1"; a list as one flow-style
// value ("[0.5, 0.5]"), a list of mappings too ("data.train_transforms" -> "[{type: flip}]").
MlflowKeyValues flatten_params(const std::string& yaml);
// The tags of a run directory: mlflow.source.name, stoker.version, stoker.run_dir and, from its
// environment.json, stoker.commit, stoker.host, stoker.device, stoker.gpu, stoker.torch, stoker.hardware.
MlflowKeyValues run_tags(const std::filesystem::path& run_dir);
// config.yaml and environment.json of the run directory as they are at the end, and report.html
// made then from its metrics.jsonl (observe/report.h), since the trainer writes the file only after
// fit() returns.
std::vector<MlflowArtifact> run_artifacts(const std::filesystem::path& run_dir);

class MlflowSink : public MetricsSink {
 public:
  // Starts the sender thread, which creates the run at once. Throws for a malformed tracking_uri.
  explicit MlflowSink(MlflowOptions options);
  // Without end() (an exception left fit()): finishes as end() does, with status FAILED.
  ~MlflowSink() override;
  MlflowSink(const MlflowSink&) = delete;
  MlflowSink& operator=(const MlflowSink&) = delete;

  void step(const StepRecord& record) override;
  void epoch(const EpochRecord& record) override;
  // FINISHED (KILLED when the run was interrupted); waits at most end_wait_s (and about a second more
  // for a request under way to stop), then logs what was sent or what was not.
  void end(const FitResult& result) override;

  // What became of everything given to the sink so far.
  struct Tally {
    std::string run_id, experiment_id;   // empty until the run exists
    int64_t metrics = 0;                 // metric values given by records
    int64_t sent_metrics = 0;
    int64_t dropped_metrics = 0;   // dropped with their record when the queue was full
    int64_t refused_metrics = 0;   // in a batch the server answered with an error (HTTP 4xx)
    int64_t params = 0, sent_params = 0;
    int64_t artifacts = 0, sent_artifacts = 0;
    int64_t failures = 0;          // failed calls, retried ones included
    bool status_sent = false;
  };
  Tally tally() const;
  // The line end() logs: what was sent, or what was not and why.
  std::string summary() const;

 private:
  using Clock = std::chrono::steady_clock;
  void enqueue(int64_t step, const std::vector<Scalar>& scalars);
  void finish(const std::string& status);
  void send_loop();
  bool advance();
  void open_run();
  void send_params();
  bool take_batch();
  void send_batch();
  void close_run();
  void failed(const MlflowCallFailed& e);
  void refused(const std::string& what, const MlflowCallFailed& e);
  bool wait_to_retry(double seconds);

  MlflowOptions options_;
  std::unique_ptr<MlflowRest> rest_;  // used only by the sender thread

  mutable std::mutex mutex_;  // guards everything below except the sender's own state
  std::condition_variable wake_;      // a record queued, end() called, abort
  std::condition_variable finished_;  // the sender thread is done
  std::deque<std::vector<MlflowMetric>> queue_;  // one entry per record
  Tally tally_;
  bool finishing_ = false, sender_done_ = false, gave_up_ = false, warned_ = false, warned_refused_ = false;
  std::string end_status_, gave_up_reason_;
  Clock::time_point deadline_;
  int64_t wakeups_ = 0;  // end() counts one: a wait between retries ends at once
  std::atomic<bool> abort_{false};

  // The sender thread's own.
  MlflowRun run_;
  std::vector<MlflowMetric> pending_;  // taken from the queue, being sent
  size_t params_done_ = 0, artifacts_done_ = 0;

  int64_t start_ms_ = 0;  // when the sink was made: the run's start_time
  bool ended_ = false;    // (the training thread's) end() or the destructor ran
  std::thread sender_;
};

}  // namespace stoker
