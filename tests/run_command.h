// Running a command line from a test (the trainer program, a launcher), with its output.
#pragma once

#include <string>

namespace stoker::testing {

// A shell command line's exit status (-1 when it did not exit normally) and its stdout and stderr together.
struct CommandResult {
  int exit_code = -1;
  std::string output;
};
CommandResult run_command(const std::string& line);

}  // namespace stoker::testing
