// The clock the data pipeline times its stages with (steady, in nanoseconds).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace stoker::data {

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Adds the nanoseconds from its construction to its destruction to `total` (also on an exception).
template <typename Total>
class StageTimer {
 public:
  explicit StageTimer(Total& total) : total_(total), start_(now_ns()) {}
  ~StageTimer() { total_ += now_ns() - start_; }
  StageTimer(const StageTimer&) = delete;
  StageTimer& operator=(const StageTimer&) = delete;

 private:
  Total& total_;
  int64_t start_;
};

}  // namespace stoker::data
