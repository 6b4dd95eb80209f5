// Stoker's error type and check macro. Every user-facing failure (bad config, missing data,
// unreadable checkpoint) is a stoker::Error whose message says what went wrong, where (file, key,
// sample) and what to do. Programs catch it at the top and exit non-zero; library code never exits.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace stoker {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, std::string location = "")
      : std::runtime_error(message), location_(std::move(location)) {}
  // Where a STOKER_CHECK failed, for bug reports and the debug log (not the user's screen):
  // "check 'n > 0' failed at data/loader.cpp:120"; empty for an error thrown otherwise.
  const std::string& location() const { return location_; }

 private:
  std::string location_;
};

namespace detail {
[[noreturn]] void check_failed(const char* file, int line, const char* condition,
                               const std::string& message);
}  // namespace detail

}  // namespace stoker

// Throws stoker::Error with a formatted message when `cond` is false. what() is the message alone
// (what the user reads); the failed condition and source location are kept in location().
//   STOKER_CHECK(n > 0, "{}: expected a positive count, got {}; hint: ...", path, n);
#define STOKER_CHECK(cond, ...)                                                       \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      ::stoker::detail::check_failed(__FILE__, __LINE__, #cond, fmt::format(__VA_ARGS__)); \
    }                                                                                 \
  } while (false)

// Throws stoker::Error with a formatted message, unconditionally.
#define STOKER_FAIL(...) throw ::stoker::Error(fmt::format(__VA_ARGS__))
