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
  // How to run this program again, for the commands it prints (resume, report): $STOKER_INVOKED_AS
  // when a wrapper set it (`./stoker.sh train`), else argv[0] as typed.
  std::string program = "trainer";
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
  int64_t doctor_steps = 30;           // doctor: timed steps per rung
  bool tune = false;                   // doctor
  double tune_budget = 90;             // doctor --tune: seconds
  bool batch = false;                  // doctor
  std::string trace;                   // doctor: timeline of the full rung
  std::string save_to;                 // doctor --save-to: a run directory for doctor.json
  int64_t max_batch = 4096;            // doctor --batch
  double knee = 0.1;                   // doctor --batch: the gain per doubling under which it stops
  bool check = false;                  // doctor --check: the performance contract
  double min_ratio = 0.9;              // doctor --check: the minimum share of the ceiling
  std::string write_to;                // doctor --write: a copy of the recipe with the tuned values
  bool in_place = false;               // doctor --in-place: the recipe itself
  int64_t memory_budget_mb = 0;        // doctor: caches (and --batch on the CPU); 0 = half the free memory
  std::string checkpoint;              // eval, predict
  int64_t top = 5;                     // predict
  bool ema = false;                    // predict
  std::vector<std::string> images;     // predict
  std::string run_dir;                 // report
  std::vector<std::string> compare;    // report
  std::string output_file;             // report, export
  std::string format;                  // export: empty = from --output's extension
  int64_t opset = 0;                   // export: 0 = the default (17)
  bool dynamic_batch = false;          // export
  bool include_normalize = false;      // export
  std::string dtype;                   // export: empty = float32
  std::string input_size;              // export: HxW or N; empty = the recipe's
  std::string pack_from, pack_to;      // pack
  int64_t max_side = 0;                // pack: 0 keeps the images as they are
  int64_t quality = 90;                // pack: JPEG quality of re-encoded images
  double shard_size_mb = 256;          // pack
  int64_t pack_shards = 0;             // pack: 0 cuts shards by size
  int64_t pack_workers = 0;            // pack: threads encoding samples (0: the hardware's threads)
};

// The handlers; each returns the exit status (0 done, 130 stopped by a signal) and throws on errors.
int train(const Args& args);
int bench_data(const Args& args);
int bench_step(const Args& args);
int eval(const Args& args);
int predict(const Args& args);
int doctor(const Args& args);
int report(const Args& args);
int export_weights(const Args& args);
int pack(const Args& args);

}  // namespace stoker::apps
