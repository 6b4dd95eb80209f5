// Two kinds of stoker::Error that bindings map onto their language's types (python/: FileNotFoundError
// and ValueError; any other Error is a RuntimeError). Their messages read as any Error's.
#pragma once

#include <string>

#include <fmt/format.h>

#include "common/error.h"

namespace stoker {

// A file or folder the user named (a recipe, data.root, a shard, a checkpoint) does not exist.
class NotFoundError : public Error {
 public:
  using Error::Error;
};

// A recipe's key or value (or a --set) is wrong: unknown, of the wrong type, out of range.
class InvalidValueError : public Error {
 public:
  using Error::Error;
};

}  // namespace stoker

// STOKER_CHECK for a path the user named that must exist: throws stoker::NotFoundError.
#define STOKER_CHECK_FOUND(cond, ...)                                                                     \
  do {                                                                                                    \
    if (!(cond)) {                                                                                        \
      throw ::stoker::NotFoundError(fmt::format(__VA_ARGS__),                                             \
                                    fmt::format("check '{}' failed at {}:{}", #cond, __FILE__, __LINE__)); \
    }                                                                                                     \
  } while (false)
