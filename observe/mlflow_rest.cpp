// MLflow's REST API over libcurl: see mlflow_rest.h.
#include "observe/mlflow_rest.h"

#include <curl/curl.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <mutex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace stoker {
namespace {

using Json = nlohmann::json;

void global_init() {  // once per process, before any handle (libcurl asks for it before threads start)
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

size_t append_body(char* data, size_t size, size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}

int check_abort(void* abort, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  const auto& f = *static_cast<const std::function<bool()>*>(abort);
  return f && f() ? 1 : 0;  // non-zero: CURLE_ABORTED_BY_CALLBACK
}

long milliseconds(double seconds) { return std::max(1L, static_cast<long>(std::lround(seconds * 1000))); }

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

// MLflow's error body is {"error_code": "...", "message": "..."}; anything else is shown on one line.
std::string server_message(const std::string& body) {
  try {
    const Json json = Json::parse(body);
    if (json.is_object() && json.contains("message") && json["message"].is_string()) {
      return json["message"].get<std::string>();
    }
  } catch (const Json::exception&) {
  }
  std::string text;  // not MLflow's answer (a proxy's or another server's page): on one line, cut
  for (const char c : body) {
    if (!std::isspace(static_cast<unsigned char>(c))) {
      text += c;
    } else if (!text.empty() && text.back() != ' ') {
      text += ' ';
    }
  }
  return text.size() > 200 ? text.substr(0, 200) + "..." : text;
}

bool has_error_code(const std::string& body, const char* code) {
  try {
    const Json json = Json::parse(body);
    return json.is_object() && json.value("error_code", std::string()) == code;
  } catch (const Json::exception&) {
    return false;
  }
}

Json parse_answer(const std::string& body, const std::string& what) {
  try {
    return Json::parse(body);
  } catch (const Json::exception& e) {
    throw MlflowCallFailed(fmt::format("{} answered with something that is not JSON ({})", what, e.what()), false);
  }
}

Json metric_value(double value) {  // protobuf's JSON mapping: non-finite doubles are strings
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  return value;
}

Json key_values(const MlflowKeyValues& pairs) {
  Json out = Json::array();
  for (const auto& [key, value] : pairs) out.push_back({{"key", key}, {"value", value}});
  return out;
}

}  // namespace

std::string mlflow_log_batch_json(const std::string& run_id, const std::vector<MlflowMetric>& metrics,
                                  const MlflowKeyValues& params) {
  Json body = {{"run_id", run_id}};
  Json list = Json::array();
  for (const MlflowMetric& m : metrics) {
    list.push_back({{"key", m.key}, {"value", metric_value(m.value)}, {"timestamp", m.timestamp_ms}, {"step", m.step}});
  }
  if (!list.empty()) body["metrics"] = std::move(list);
  if (!params.empty()) body["params"] = key_values(params);
  return body.dump();
}

MlflowRest::MlflowRest(std::string tracking_uri, MlflowTimeouts timeouts, std::function<bool()> abort)
    : uri_(std::move(tracking_uri)), timeouts_(timeouts), abort_(std::move(abort)) {
  while (!uri_.empty() && uri_.back() == '/') uri_.pop_back();
  global_init();
  curl_ = curl_easy_init();
  if (curl_ == nullptr) throw MlflowCallFailed("libcurl could not make a handle (out of memory?)", false);
}

MlflowRest::~MlflowRest() { curl_easy_cleanup(static_cast<CURL*>(curl_)); }

std::string MlflowRest::escape(const std::string& text) {
  char* escaped = curl_easy_escape(static_cast<CURL*>(curl_), text.c_str(), static_cast<int>(text.size()));
  std::string out = escaped != nullptr ? escaped : text;
  curl_free(escaped);
  return out;
}

MlflowRest::Response MlflowRest::perform(const char* method, const std::string& url, const std::string* body,
                                         const char* content_type) {
  if (abort_ && abort_()) throw MlflowCallFailed("stopped waiting for the server", true);
  auto* c = static_cast<CURL*>(curl_);
  curl_easy_reset(c);  // keeps the open connection
  Response response;
  char error[CURL_ERROR_SIZE] = {};
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // no SIGALRM for timeouts: this is not the main thread
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, milliseconds(timeouts_.connect_s));
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, milliseconds(timeouts_.request_s));
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, append_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &response.body);
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, check_abort);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, &abort_);
  curl_slist* headers = curl_slist_append(nullptr, "Expect:");  // no 100-continue round trip
  if (content_type != nullptr) {
    headers = curl_slist_append(headers, fmt::format("Content-Type: {}", content_type).c_str());
  }
  const std::string token = env("MLFLOW_TRACKING_TOKEN"), user = env("MLFLOW_TRACKING_USERNAME");
  if (!token.empty()) headers = curl_slist_append(headers, ("Authorization: Bearer " + token).c_str());
  const std::string password = env("MLFLOW_TRACKING_PASSWORD");
  if (token.empty() && !user.empty()) curl_easy_setopt(c, CURLOPT_USERPWD, (user + ":" + password).c_str());
  if (env("MLFLOW_TRACKING_INSECURE_TLS") == "true") {
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  if (body != nullptr) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body->data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body->size()));
  }
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
  const CURLcode rc = curl_easy_perform(c);
  curl_slist_free_all(headers);
  if (rc == CURLE_ABORTED_BY_CALLBACK) throw MlflowCallFailed("stopped waiting for the server", true);
  if (rc != CURLE_OK) throw MlflowCallFailed(error[0] != 0 ? error : curl_easy_strerror(rc), true);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &response.status);
  return response;
}

MlflowRest::Response MlflowRest::get(const std::string& api, const std::string& query) {
  return perform("GET", fmt::format("{}/api/2.0/mlflow/{}?{}", uri_, api, query), nullptr, nullptr);
}

MlflowRest::Response MlflowRest::post(const std::string& api, const std::string& json) {
  return perform("POST", fmt::format("{}/api/2.0/mlflow/{}", uri_, api), &json, "application/json");
}

namespace {

// Throws MlflowCallFailed unless the answer is a success.
void expect_ok(long status, const std::string& body, const std::string& what) {
  if (status >= 200 && status < 300) return;
  const bool transient = status >= 500 || status == 429 || status == 408;
  throw MlflowCallFailed(fmt::format("{}: HTTP {}: {}", what, status, server_message(body)), transient);
}

}  // namespace

std::string MlflowRest::experiment_id(const std::string& name) {
  const std::string what = fmt::format("finding the experiment '{}'", name);
  Response found = get("experiments/get-by-name", "experiment_name=" + escape(name));
  if (found.status == 404 && has_error_code(found.body, "RESOURCE_DOES_NOT_EXIST")) {
    const Response made = post("experiments/create", Json({{"name", name}}).dump());
    if (!has_error_code(made.body, "RESOURCE_ALREADY_EXISTS")) {  // else another process made it first
      expect_ok(made.status, made.body, fmt::format("creating the experiment '{}'", name));
      return parse_answer(made.body, what).value("experiment_id", "");
    }
    found = get("experiments/get-by-name", "experiment_name=" + escape(name));
  }
  expect_ok(found.status, found.body, what);
  const Json experiment = parse_answer(found.body, what).value("experiment", Json::object());
  if (experiment.value("lifecycle_stage", "") == "deleted") {
    throw MlflowCallFailed(fmt::format("the experiment '{}' is deleted; restore it (`mlflow experiments restore "
                                       "--experiment-id {}`) or name another in the mlflow sink's experiment "
                                       "(logging.sinks: {{type: mlflow, experiment: ...}})",
                                       name, experiment.value("experiment_id", "")),
                           false);
  }
  return experiment.value("experiment_id", "");
}

MlflowRun MlflowRest::create_run(const std::string& experiment_id, const std::string& run_name, int64_t start_ms,
                                 const MlflowKeyValues& tags) {
  Json body = {{"experiment_id", experiment_id}, {"start_time", start_ms}, {"tags", key_values(tags)}};
  if (!run_name.empty()) body["run_name"] = run_name;
  const Response made = post("runs/create", body.dump());
  expect_ok(made.status, made.body, "creating a run");
  const Json answer = parse_answer(made.body, "creating a run");
  const Json info = answer.value("run", Json::object()).value("info", Json::object());
  MlflowRun run{info.value("run_id", ""), info.value("artifact_uri", "")};
  if (run.id.empty()) throw MlflowCallFailed("creating a run: the answer holds no run_id", false);
  return run;
}

void MlflowRest::log_batch(const std::string& run_id, const std::vector<MlflowMetric>& metrics,
                           const MlflowKeyValues& params) {
  const Response r = post("runs/log-batch", mlflow_log_batch_json(run_id, metrics, params));
  expect_ok(r.status, r.body, fmt::format("logging {} metric values and {} params", metrics.size(), params.size()));
}

void MlflowRest::update_run(const std::string& run_id, const std::string& status, int64_t end_ms) {
  const Response r = post("runs/update", Json({{"run_id", run_id}, {"status", status}, {"end_time", end_ms}}).dump());
  expect_ok(r.status, r.body, fmt::format("setting the run's status to {}", status));
}

bool MlflowRest::upload_artifact(const std::string& artifact_uri, const std::string& path, const std::string& bytes) {
  // mlflow-artifacts:/1/<run>/artifacts or mlflow-artifacts://host:port/1/<run>/artifacts
  const std::string scheme = "mlflow-artifacts:";
  if (artifact_uri.rfind(scheme, 0) != 0) return false;
  std::string rest = artifact_uri.substr(scheme.size());
  if (rest.rfind("//", 0) == 0) rest = rest.substr(std::min(rest.size(), rest.find('/', 2)));
  std::string url = uri_ + "/api/2.0/mlflow-artifacts/artifacts";
  for (const std::string& part : {rest, path}) {  // each '/'-separated segment escaped, empty ones left out
    for (size_t at = 0; at <= part.size();) {
      const size_t end = std::min(part.find('/', at), part.size());
      if (end > at) url += "/" + escape(part.substr(at, end - at));
      at = end + 1;
    }
  }
  const Response r = perform("PUT", url, &bytes, "application/octet-stream");
  expect_ok(r.status, r.body, fmt::format("uploading the artifact {}", path));
  return true;
}

}  // namespace stoker
