// MLflow's REST API (the 2.0 endpoints every MLflow tracking server serves) over libcurl, as the
// MLflow sink's sender thread (observe/mlflow.h) calls it: find or create the experiment, create a
// run, log-batch, set the run's end status, and upload a file through the server's artifact proxy
// (`mlflow server --serve-artifacts`). Each call is synchronous with short timeouts and can be
// aborted from another thread; a failure is an MlflowCallFailed that says whether trying again may
// help. Not thread-safe: one object per thread.
//
// Authentication as MLflow's own clients read it from the environment: MLFLOW_TRACKING_TOKEN (a
// bearer token) or MLFLOW_TRACKING_USERNAME + MLFLOW_TRACKING_PASSWORD (HTTP basic);
// MLFLOW_TRACKING_INSECURE_TLS=true skips the TLS certificate check.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace stoker {

// One value of a metric at an optimizer step; `timestamp_ms`: Unix time in milliseconds.
struct MlflowMetric {
  std::string key;
  double value = 0;
  int64_t timestamp_ms = 0;
  int64_t step = 0;
};

using MlflowKeyValues = std::vector<std::pair<std::string, std::string>>;

// The limits of one runs/log-batch call (MLflow's REST API reference).
inline constexpr size_t kMlflowBatchMetrics = 1000;
inline constexpr size_t kMlflowBatchParams = 100;

// A call that failed. transient(): the server did not answer (connection refused, a timeout, HTTP 5xx
// or 429), so the same call may succeed later; otherwise it answered and refused the request (HTTP
// 4xx), and sending it again would not help.
class MlflowCallFailed : public std::runtime_error {
 public:
  MlflowCallFailed(const std::string& message, bool transient) : std::runtime_error(message), transient_(transient) {}
  bool transient() const { return transient_; }

 private:
  bool transient_;
};

struct MlflowTimeouts {
  double connect_s = 3;   // to open the connection
  double request_s = 10;  // the whole request, connection included
};

struct MlflowRun {
  std::string id;
  std::string artifact_uri;  // "mlflow-artifacts:/<experiment>/<run>/artifacts" when the server proxies
};

class MlflowRest {
 public:
  // `tracking_uri`: http(s)://host:port[/prefix] (a trailing '/' is ignored). `abort` is polled while
  // a request runs (about once a second at least); when it returns true the request fails at once.
  MlflowRest(std::string tracking_uri, MlflowTimeouts timeouts, std::function<bool()> abort);
  ~MlflowRest();
  MlflowRest(const MlflowRest&) = delete;
  MlflowRest& operator=(const MlflowRest&) = delete;

  // The id of the experiment called `name`, created when there is none.
  std::string experiment_id(const std::string& name);
  // A new run (status RUNNING) in the experiment; an empty `run_name` lets the server pick one.
  MlflowRun create_run(const std::string& experiment_id, const std::string& run_name, int64_t start_ms,
                       const MlflowKeyValues& tags);
  // At most kMlflowBatchMetrics metrics and kMlflowBatchParams params. A value that is not finite is
  // sent as MLflow's JSON spells it ("NaN", "Infinity").
  void log_batch(const std::string& run_id, const std::vector<MlflowMetric>& metrics, const MlflowKeyValues& params);
  // `status`: FINISHED, FAILED or KILLED.
  void update_run(const std::string& run_id, const std::string& status, int64_t end_ms);
  // PUTs `bytes` as the artifact `path` of a run whose artifact_uri is "mlflow-artifacts:..." (the
  // server's proxy); returns false, sending nothing, for any other artifact store.
  bool upload_artifact(const std::string& artifact_uri, const std::string& path, const std::string& bytes);

  const std::string& tracking_uri() const { return uri_; }

 private:
  struct Response {
    long status = 0;
    std::string body;
  };
  Response perform(const char* method, const std::string& url, const std::string* body, const char* content_type);
  Response get(const std::string& api, const std::string& query);
  Response post(const std::string& api, const std::string& json);
  std::string escape(const std::string& text);

  std::string uri_;
  MlflowTimeouts timeouts_;
  std::function<bool()> abort_;
  void* curl_ = nullptr;  // CURL*, reused so that the connection is kept alive between calls
};

// The JSON body of a log-batch call (for tests).
std::string mlflow_log_batch_json(const std::string& run_id, const std::vector<MlflowMetric>& metrics,
                                  const MlflowKeyValues& params);

}  // namespace stoker
