// The subcommands of the `trainer` program (apps/trainer.cpp): what the command line said, and one
// handler per subcommand that calls the library and prints what it returns. apps/trainer.cpp holds
// the table that names each subcommand with its flags and handler, and the parsing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stoker::apps {

// What the command line said; each subcommand's flags fill the fields it uses.
struct Args {
  std::string config;
  std::vector<std::string> overrides;  // --set, in order
  bool print_config = false;
  std::string resume;                  // train
  bool allow_config_change = false;    // train
  std::string progress = "auto";       // train
  int64_t batches = 200;               // bench-data
  std::string split = "train";         // bench-data
  std::string output = "float";        // bench-data
  int64_t steps = 50;                  // bench-step
  std::string checkpoint;              // eval, predict
  int64_t top = 5;                     // predict
  bool ema = false;                    // predict
  std::vector<std::string> images;     // predict
};

// The handlers; each returns the exit status (0 done, 130 stopped by a signal) and throws on errors.
int train(const Args& args);
int bench_data(const Args& args);
int bench_step(const Args& args);
int eval(const Args& args);
int predict(const Args& args);

}  // namespace stoker::apps
