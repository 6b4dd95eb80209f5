#include "common/error.h"

namespace stoker::detail {

void check_failed(const char* file, int line, const char* condition, const std::string& message) {
  throw Error(fmt::format("{} [check '{}' failed at {}:{}]", message, condition, file, line));
}

}  // namespace stoker::detail
