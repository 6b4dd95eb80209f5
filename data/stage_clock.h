// The clock the data pipeline times its stages with (steady, in nanoseconds).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "common/trace.h"

namespace stoker::data {

// The steady clock in nanoseconds (the trace's clock, so that stage timers and events line up).
using trace::now_ns;

// Adds the nanoseconds from its construction to its destruction to `total` (also on an exception),
// and records them as an event named `trace_name` (a literal) while a trace is recording.
template <typename Total>
class StageTimer {
 public:
  explicit StageTimer(Total& total, const char* trace_name = nullptr)
      : total_(total), trace_name_(trace_name), start_(now_ns()) {}
  ~StageTimer() {
    const int64_t end = now_ns();
    total_ += end - start_;
    if (trace_name_ != nullptr) trace::record(trace_name_, start_, end);
  }
  StageTimer(const StageTimer&) = delete;
  StageTimer& operator=(const StageTimer&) = delete;

 private:
  Total& total_;
  const char* trace_name_;
  int64_t start_;
};

}  // namespace stoker::data
