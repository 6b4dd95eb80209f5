// A timeline of what each thread did, for a person to look at: `train.trace` and `trainer doctor
// --trace` record a window of steps and write it as Chrome / Perfetto Trace Event JSON (open it in
// ui.perfetto.dev or chrome://tracing). One track per thread: each loader worker (read / decode /
// transform per sample), the training thread (wait / copy / forward / backward / optimizer).
// On CUDA the training thread's events are host time, when the work was issued; the GPU runs it
// later, so a gap on that track is host time the GPU may or may not have filled.
//
//   trace::start();                                  // from now on, record
//   { trace::Scope s("forward"); model->forward(x); }
//   trace::stop();
//   trace::write("trace.json");                      // atomically
//
// Recording costs one relaxed atomic load while off, and an uncontended lock per event while on.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>

namespace stoker::trace {

bool enabled();
// Starts recording, dropping what was recorded before.
void start();
void stop();
// Names the calling thread's track ("loader worker 0", "training").
void name_thread(const std::string& name);
// Records `name` on the calling thread's track from begin_ns to end_ns (steady clock, nanoseconds).
// `name` must outlive the trace: a string literal.
void record(const char* name, int64_t begin_ns, int64_t end_ns);
// Events recorded since start().
int64_t event_count();
// Writes what was recorded as Trace Event JSON ({"traceEvents": [...]}) to `path`, atomically.
void write(const std::filesystem::path& path);

// The steady clock in nanoseconds: the clock of every event, and of the data pipeline's stage timers.
inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
// The same clock in seconds, for durations a person reads (a step's, an epoch's).
inline double now_s() { return static_cast<double>(now_ns()) * 1e-9; }

// Records its own lifetime as one event when recording is on.
class Scope {
 public:
  explicit Scope(const char* name) : name_(name), begin_(enabled() ? now_ns() : -1) {}
  ~Scope() {
    if (begin_ >= 0) record(name_, begin_, now_ns());
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* name_;
  int64_t begin_;
};

}  // namespace stoker::trace
