// The MLflow sink: the run's params, tags and artifacts, the bounded queue the training thread fills
// and the sender thread that empties it. See mlflow.h.
#include "observe/mlflow.h"

#include <fstream>
#include <regex>
#include <sstream>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "common/error.h"
#include "common/log.h"
#include "observe/metrics_file.h"
#include "observe/report.h"

#ifndef STOKER_VERSION
#define STOKER_VERSION "unknown"
#endif

namespace stoker {
namespace fs = std::filesystem;

namespace {

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string read_whole(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  STOKER_CHECK(in.good(), "cannot read {}", path.string());
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// A YAML node on one line: scalars as they are, sequences as [a, b], mappings as {k: v}.
std::string inline_yaml(const YAML::Node& node) {
  std::vector<std::string> parts;
  if (node.IsSequence()) {
    for (const YAML::Node& item : node) parts.push_back(inline_yaml(item));
    return fmt::format("[{}]", fmt::join(parts, ", "));
  }
  if (node.IsMap()) {
    for (const auto& kv : node) parts.push_back(kv.first.Scalar() + ": " + inline_yaml(kv.second));
    return fmt::format("{{{}}}", fmt::join(parts, ", "));
  }
  return node.IsScalar() ? node.Scalar() : "";
}

void flatten(const YAML::Node& node, const std::string& prefix, MlflowKeyValues& out) {
  if (node.IsMap()) {
    for (const auto& kv : node) {
      flatten(kv.second, prefix.empty() ? kv.first.Scalar() : prefix + "." + kv.first.Scalar(), out);
    }
    return;
  }
  std::string value = inline_yaml(node);
  if (value.size() > kMlflowParamValueMax) value = value.substr(0, kMlflowParamValueMax - 3) + "...";
  out.emplace_back(prefix, std::move(value));
}

std::string plural(int64_t n, const char* one, const char* many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

}  // namespace

// ---- what a run sends ---------------------------------------------------------------------------------

void check_mlflow_tracking_uri(const std::string& uri, const std::string& key) {
  static const std::regex http("https?://[^/\\s]+(/\\S*)?");
  STOKER_CHECK(std::regex_match(uri, http),
               "{} is '{}'; expected the http:// or https:// address of an MLflow tracking server, e.g. "
               "http://127.0.0.1:5000 (`mlflow server --serve-artifacts` serves one), or leave it empty for no MLflow",
               key, uri);
}

MlflowKeyValues flatten_params(const std::string& yaml) {
  MlflowKeyValues out;
  flatten(YAML::Load(yaml), "", out);
  return out;
}

MlflowKeyValues run_tags(const fs::path& run_dir) {
  MlflowKeyValues tags = {{"mlflow.source.name", "stoker trainer"},
                          {"mlflow.source.type", "LOCAL"},
                          {"stoker.version", STOKER_VERSION},
                          {"stoker.run_dir", run_dir.string()}};
  const fs::path file = run_dir / "environment.json";
  if (!fs::exists(file)) return tags;
  try {
    const MetricsRecord environment = parse_metrics_line(read_whole(file), file.string());
    for (const auto& [key, tag] : std::vector<std::pair<std::string, std::string>>{
             {"stoker_commit", "stoker.commit"}, {"host", "stoker.host"}, {"device", "stoker.device"},
             {"gpu", "stoker.gpu"}, {"torch", "stoker.torch"}, {"hardware", "stoker.hardware"}}) {
      const auto found = environment.strings.find(key);
      if (found != environment.strings.end()) tags.emplace_back(tag, found->second);
    }
  } catch (const std::exception& e) {
    logger().debug("MLflow tags: {} left out: {}", file.string(), e.what());
  }
  return tags;
}

std::vector<MlflowArtifact> run_artifacts(const fs::path& run_dir) {
  const auto file = [&](const char* name) { return [path = run_dir / name] { return read_whole(path); }; };
  return {{"config.yaml", file("config.yaml")},
          {"environment.json", file("environment.json")},
          {"report.html", [run_dir] { return report_html({read_run(run_dir)}); }}};
}

// ---- the training thread's side ----------------------------------------------------------------------

MlflowSink::MlflowSink(MlflowOptions options) : options_(std::move(options)) {
  check_mlflow_tracking_uri(options_.tracking_uri, "the MLflow tracking URI");
  STOKER_CHECK(options_.max_queued_records > 0, "MLflow: max_queued_records must be positive, got {}",
               options_.max_queued_records);
  rest_ = std::make_unique<MlflowRest>(options_.tracking_uri, options_.timeouts, [this] { return abort_.load(); });
  tally_.params = static_cast<int64_t>(options_.params.size());
  tally_.artifacts = static_cast<int64_t>(options_.artifacts.size());
  start_ms_ = unix_ms();
  sender_ = std::thread([this] { send_loop(); });
}

MlflowSink::~MlflowSink() {
  try {
    finish("FAILED");
  } catch (const std::exception& e) {
    logger().debug("MLflow: finishing the run failed: {}", e.what());
  }
}

void MlflowSink::step(const StepRecord& record) { enqueue(record.step, scalars_of(record)); }
void MlflowSink::epoch(const EpochRecord& record) { enqueue(record.step, scalars_of(record)); }
void MlflowSink::end(const FitResult& result) { finish(result.interrupted ? "KILLED" : "FINISHED"); }

void MlflowSink::enqueue(int64_t step, const std::vector<Scalar>& scalars) {
  const int64_t now = unix_ms();
  std::vector<MlflowMetric> metrics;
  metrics.reserve(scalars.size());
  for (const Scalar& s : scalars) metrics.push_back({s.tag, s.value, now, step});
  const auto n = static_cast<int64_t>(metrics.size());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tally_.metrics += n;
    if (gave_up_ || finishing_) return;  // counted as not sent
    queue_.push_back(std::move(metrics));
    while (static_cast<int64_t>(queue_.size()) > options_.max_queued_records) {
      tally_.dropped_metrics += static_cast<int64_t>(queue_.front().size());
      queue_.pop_front();
    }
  }
  wake_.notify_one();
}

void MlflowSink::finish(const std::string& status) {
  if (ended_) return;
  ended_ = true;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    finishing_ = true;
    end_status_ = status;
    deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(std::max(0.0, options_.end_wait_s)));
    ++wakeups_;
    wake_.notify_all();
    finished_.wait_until(lock, deadline_, [&] { return sender_done_; });
    abort_ = true;  // a request under way stops within about a second (libcurl's progress callback)
    wake_.notify_all();
  }
  if (sender_.joinable()) sender_.join();
  const Tally t = tally();
  const bool all = t.sent_metrics == t.metrics && t.sent_params == t.params && t.sent_artifacts == t.artifacts &&
                   t.status_sent;
  if (all) {
    logger().info("{}", summary());
  } else {
    logger().warn("{}", summary());
  }
}

MlflowSink::Tally MlflowSink::tally() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return tally_;
}

std::string MlflowSink::summary() const {
  std::unique_lock<std::mutex> lock(mutex_);
  const Tally t = tally_;
  const std::string status = end_status_.empty() ? "RUNNING" : end_status_;
  const std::string refusal = gave_up_ ? fmt::format(" (the server refused it: {})", gave_up_reason_) : "";
  lock.unlock();
  const std::string& uri = options_.tracking_uri;
  const std::string run =
      t.run_id.empty() ? std::string("the run was never created")
                       : fmt::format("run {} at {}/#/experiments/{}/runs/{}", t.run_id, uri, t.experiment_id, t.run_id);
  std::vector<std::string> missing, why;
  if (t.sent_metrics < t.metrics) {
    const int64_t unsent = t.metrics - t.sent_metrics - t.dropped_metrics - t.refused_metrics;
    if (t.dropped_metrics > 0) {
      why.push_back(fmt::format("{} dropped when the queue of {} was full", t.dropped_metrics,
                                plural(options_.max_queued_records, "record", "records")));
    }
    if (unsent > 0) why.push_back(fmt::format("{} unsent at the end", unsent));
    if (t.refused_metrics > 0) why.push_back(fmt::format("{} refused by the server", t.refused_metrics));
    missing.push_back(
        fmt::format("{} of {} metric values ({})", t.metrics - t.sent_metrics, t.metrics, fmt::join(why, ", ")));
  }
  if (t.sent_params < t.params) missing.push_back(fmt::format("{} of {} params", t.params - t.sent_params, t.params));
  if (t.sent_artifacts < t.artifacts) {
    missing.push_back(
        fmt::format("{} of {}", t.artifacts - t.sent_artifacts, plural(t.artifacts, "artifact", "artifacts")));
  }
  if (!t.status_sent) missing.push_back(fmt::format("the run's end status {}", status));
  if (missing.empty()) {
    return fmt::format("MLflow: {}, {} metric values, {}, {}, status {}", run, t.sent_metrics,
                       plural(t.params, "param", "params"), plural(t.artifacts, "artifact", "artifacts"), status);
  }
  return fmt::format("MLflow at {}: not sent: {}; {}{}; training was not affected", uri, fmt::join(missing, ", "), run,
                     refusal);
}

// ---- the sender thread ----------------------------------------------------------------------------------

void MlflowSink::send_loop() {
  double wait = 0;
  for (;;) {
    try {
      if (!advance()) break;
      if (wait > 0) logger().info("MLflow at {} answers again; sending what was kept", options_.tracking_uri);
      wait = 0;
    } catch (const MlflowCallFailed& e) {
      if (abort_) break;
      failed(e);
      if (!e.transient()) break;
      wait = wait == 0 ? options_.retry_min_s : std::min(2 * wait, options_.retry_max_s);
      if (!wait_to_retry(wait)) break;
    } catch (const std::exception& e) {  // never let the thread end the process
      failed(MlflowCallFailed(e.what(), false));
      break;
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  sender_done_ = true;
  finished_.notify_all();
}

// One step of the work: create the run, send params, send metrics, or (with end() called and the queue
// empty) send the artifacts and the status; false when nothing is left to do.
bool MlflowSink::advance() {
  if (abort_) return false;
  if (run_.id.empty()) {
    open_run();
  } else if (params_done_ < options_.params.size()) {
    send_params();
  } else if (!pending_.empty() || take_batch()) {
    send_batch();
  } else {
    if (!abort_) close_run();
    return false;
  }
  return true;
}

void MlflowSink::open_run() {
  const std::string experiment = rest_->experiment_id(options_.experiment);
  run_ = rest_->create_run(experiment, options_.run_name, start_ms_, options_.tags);
  std::lock_guard<std::mutex> lock(mutex_);
  tally_.run_id = run_.id;
  tally_.experiment_id = experiment;
}

void MlflowSink::send_params() {
  const size_t n = std::min(kMlflowBatchParams, options_.params.size() - params_done_);
  const auto first = options_.params.begin() + static_cast<std::ptrdiff_t>(params_done_);
  bool sent = true;
  try {
    rest_->log_batch(run_.id, {}, MlflowKeyValues(first, first + static_cast<std::ptrdiff_t>(n)));
  } catch (const MlflowCallFailed& e) {
    if (e.transient()) throw;
    refused(plural(static_cast<int64_t>(n), "param", "params"), e);
    sent = false;
  }
  params_done_ += n;
  std::lock_guard<std::mutex> lock(mutex_);
  if (sent) tally_.sent_params += static_cast<int64_t>(n);
}

// Waits for records (or end()) and moves up to a log-batch of them into pending_; false when there
// are none and end() was called.
bool MlflowSink::take_batch() {
  std::unique_lock<std::mutex> lock(mutex_);
  wake_.wait(lock, [&] { return !queue_.empty() || finishing_ || abort_; });
  while (!queue_.empty() && (pending_.empty() || pending_.size() + queue_.front().size() <= kMlflowBatchMetrics)) {
    for (MlflowMetric& m : queue_.front()) pending_.push_back(std::move(m));
    queue_.pop_front();
  }
  return !pending_.empty();
}

void MlflowSink::send_batch() {
  const size_t n = std::min(pending_.size(), kMlflowBatchMetrics);
  const auto end = pending_.begin() + static_cast<std::ptrdiff_t>(n);
  bool sent = true;
  try {
    rest_->log_batch(run_.id, n == pending_.size() ? pending_ : std::vector<MlflowMetric>(pending_.begin(), end), {});
  } catch (const MlflowCallFailed& e) {
    if (e.transient()) throw;
    refused(fmt::format("{} metric values", n), e);
    sent = false;
  }
  pending_.erase(pending_.begin(), end);
  std::lock_guard<std::mutex> lock(mutex_);
  (sent ? tally_.sent_metrics : tally_.refused_metrics) += static_cast<int64_t>(n);
}

void MlflowSink::close_run() {
  for (; artifacts_done_ < options_.artifacts.size(); ++artifacts_done_) {
    const MlflowArtifact& artifact = options_.artifacts[artifacts_done_];
    std::string bytes;
    try {
      bytes = artifact.content();
    } catch (const std::exception& e) {
      logger().warn("MLflow: the artifact {} was not sent: {}", artifact.path, e.what());
      continue;
    }
    try {
      if (!rest_->upload_artifact(run_.artifact_uri, artifact.path, bytes)) {
        logger().info("MLflow: the run's artifacts go to {}, which the server does not take uploads for (`mlflow "
                      "server --serve-artifacts` does); they stay in the run directory only",
                      run_.artifact_uri);
        artifacts_done_ = options_.artifacts.size();
        break;
      }
    } catch (const MlflowCallFailed& e) {
      if (e.transient()) throw;
      refused("the artifact " + artifact.path, e);
      continue;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    ++tally_.sent_artifacts;
  }
  std::string status;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    status = end_status_;
  }
  try {
    rest_->update_run(run_.id, status, unix_ms());
  } catch (const MlflowCallFailed& e) {
    if (e.transient()) throw;
    refused("the run's status", e);
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  tally_.status_sent = true;
}

// A failed call: counted; the first that the server did not answer is the one warning. A refusal here
// (creating the run) ends the sending.
void MlflowSink::failed(const MlflowCallFailed& e) {
  bool warn = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++tally_.failures;
    if (!e.transient()) {
      gave_up_ = true;
      gave_up_reason_ = e.what();
      queue_.clear();  // counted as unsent
    } else if (!warned_) {
      warn = warned_ = true;
    }
  }
  if (!e.transient()) {
    logger().warn("MLflow at {} refused the run: {}; nothing more is sent to it (is the mlflow sink's tracking_uri in "
                  "logging.sinks the address of an MLflow tracking server?); training goes on",
                  options_.tracking_uri, e.what());
  } else if (warn) {
    logger().warn("MLflow at {} is not answering: {}; training goes on; metrics are kept for retry up to {} records",
                  options_.tracking_uri, e.what(), options_.max_queued_records);
  }
}

// The server answered a call with an error: what it carried is left out (sending it again would not
// help); the first such answer is a warning.
void MlflowSink::refused(const std::string& what, const MlflowCallFailed& e) {
  bool warn = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++tally_.failures;
    warn = !warned_refused_;
    warned_refused_ = true;
  }
  if (warn) {
    logger().warn("MLflow at {} refused {}: {}; they are left out, the rest is sent", options_.tracking_uri, what,
                  e.what());
  } else {
    logger().debug("MLflow at {} refused {}: {}", options_.tracking_uri, what, e.what());
  }
}

// Waits `seconds` before the next try, less when end() is called meanwhile; false when that would
// pass end()'s deadline (or end() has given up).
bool MlflowSink::wait_to_retry(double seconds) {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  if (finishing_ && until > deadline_) return false;
  const int64_t seen = wakeups_;
  wake_.wait_until(lock, until, [&] { return abort_.load() || wakeups_ != seen; });
  return !abort_;
}

}  // namespace stoker
