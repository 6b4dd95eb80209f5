#include "common/error.h"

namespace stoker::detail {

void check_failed(const char* file, int line, const char* condition, const std::string& message) {
  throw Error(message, fmt::format("check '{}' failed at {}:{}", condition, file, line));
}

}  // namespace stoker::detail
