#include "recipe/split_loader.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "common/error_kinds.h"
#include "recipe/loaders.h"
#include "trainer/checkpoint.h"

namespace stoker {

namespace {
void check_options(const Config& config, const SplitLoaderOptions& o) {
  if (o.split != "train" && o.split != "test") {
    throw InvalidValueError(fmt::format("split '{}': expected \"train\" or \"test\"", o.split));
  }
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    throw InvalidValueError(fmt::format("rank {} of world size {}: the world size must be at least 1 and the rank in "
                                        "0 .. world size - 1",
                                        o.rank, o.world_size));
  }
  if (o.split == "train" && config.data.resolution_schedule.enabled()) {
    throw InvalidValueError("data.resolution_schedule changes the training crops' size per epoch, which only a run's "
                            "loader follows; leave it out of a loader's recipe");
  }
}

// The split's data set, labelled as the run labels it (the test split by the training split's classes).
std::shared_ptr<data::Dataset> split_dataset(const Config& config, const std::string& split) {
  if (split == "train") return make_dataset(config, "train");
  Config listing = config;  // the training split only names the classes: never cached for that
  listing.data.cache = data::DataCache::kNone;
  return make_dataset(config, "test", make_dataset(listing, "train")->class_names());
}
}  // namespace

std::string loader_data_yaml(const Config& config) {
  const YAML::Node full = YAML::Load(config_to_yaml(config));
  YAML::Node out;
  out["run"]["seed"] = full["run"]["seed"];
  out["data"] = full["data"];
  // Sharding by hand differs per process: the state's world size says how the epoch was cut.
  out["data"].remove("shard_rank");
  out["data"].remove("shard_count");
  YAML::Emitter emitter;
  emitter << out;
  return emitter.c_str();
}

SplitLoader::SplitLoader(const Config& config, SplitLoaderOptions options)
    : config_(config), options_(std::move(options)) {
  check_options(config_, options_);
  const BatchArithmetic batches = batch_arithmetic(config_, options_.world_size);
  if (!batches.problem.empty()) throw InvalidValueError(batches.problem);
  shards_ = batches.shards;
  accumulate_steps_ = batches.accumulate_steps;
  const DataRanks ranks{options_.rank, options_.world_size, accumulate_steps_};
  std::shared_ptr<data::Dataset> dataset = split_dataset(config_, options_.split);
  const bool train = options_.split == "train";
  if (train) (void)training_batches_per_epoch(config_, *dataset, ranks);  // a batch larger than the shard
  loader_ = make_loader(config_, std::move(dataset), options_.device, options_.split, options_.output_uint8, ranks);
  source_ = train ? augment_training(config_, loader_, options_.rank) : loader_;
}

void SplitLoader::check_open() const {
  if (closed_) throw Error("this loader was closed; build a new one to load again");
}

void SplitLoader::set_epoch(int64_t epoch) {
  check_open();
  if (epoch < 0) throw InvalidValueError(fmt::format("epoch {}: expected 0 or more", epoch));
  epoch_ = epoch;
  batch_ = 0;
  started_ = false;
}

void SplitLoader::begin() {
  check_open();
  if (batch_ >= num_batches()) {  // the epoch was handed out whole: the next one
    ++epoch_;
    batch_ = 0;
  }
  source_->start_epoch(epoch_, batch_);
  started_ = true;
}

std::optional<data::Batch> SplitLoader::next() {
  check_open();
  if (!started_) throw Error("next() before begin(): begin() starts the epoch at the loader's position");
  std::optional<data::Batch> batch = source_->next();
  if (!batch) {
    started_ = false;
    batch_ = num_batches();  // begin() moves on to the next epoch
    return batch;
  }
  batch_ = batch->index + 1;
  return batch;
}

data::StageTimes SplitLoader::take_times() {
  check_open();
  return source_->take_times();
}

LoaderState SplitLoader::state() const {
  check_open();
  LoaderState s;
  s.split = options_.split;
  const bool finished = batch_ >= num_batches();
  s.epoch = finished ? epoch_ + 1 : epoch_;
  s.batch = finished ? 0 : batch_;
  s.world_size = shards_;
  s.batch_size = batch_size();
  s.accumulate_steps = accumulate_steps_;
  s.data_yaml = loader_data_yaml(config_);
  return s;
}

namespace {
// The keys deciding the batches whose values differ between the state's and `config`'s, as
// "key: state's -> this loader's"; each rank's batch is compared through the global batch instead.
std::vector<std::string> data_differences(const LoaderState& state, const Config& config) {
  Config saved;
  try {
    saved = parse_config(state.data_yaml, "the loader state's data");
  } catch (const Error& e) {
    throw InvalidValueError(fmt::format("the loader state is not one a loader saved: {}", e.what()));
  }
  Config mine;
  mine.run.seed = config.run.seed;
  mine.data = config.data;
  std::vector<std::string> out;
  for (const ConfigDifference& d : config_differences(saved, mine)) {
    if (!d.breaks_exactness || d.key == "data.batch_size" || d.key == "data.eval_batch_size") continue;
    if (d.key.rfind("data.shard_", 0) == 0) continue;
    out.push_back(fmt::format("{}: {} -> {}", d.key, d.before, d.after));
  }
  return out;
}
}  // namespace

void SplitLoader::load_state(const LoaderState& state) {
  check_open();
  if (state.split != options_.split) {
    throw InvalidValueError(fmt::format("the loader state is of the {} split, this loader loads the {} split",
                                        state.split, options_.split));
  }
  const std::vector<std::string> differences = data_differences(state, config_);
  if (!differences.empty()) {
    throw InvalidValueError(fmt::format("the loader state comes from another data configuration ({}: the state's -> "
                                        "this loader's); build the loader with the state's settings to resume",
                                        fmt::join(differences, "; ")));
  }
  if (state.epoch < 0 || state.batch < 0) {
    throw InvalidValueError(fmt::format("the loader state's position (epoch {}, batch {}) is negative", state.epoch,
                                        state.batch));
  }
  TrainState saved;
  saved.epoch = state.epoch;
  saved.batch_in_epoch = state.batch;
  saved.world_size = state.world_size;
  saved.batch_size = state.batch_size;
  saved.accumulate_steps = state.accumulate_steps;
  int64_t batch = 0;
  try {
    batch = resumed_batch_in_epoch(saved, shards_, batch_size(), accumulate_steps_, "the loader state");
  } catch (const Error& e) {
    throw InvalidValueError(e.what(), e.location());
  }
  if (batch > num_batches()) {
    throw InvalidValueError(fmt::format("the loader state stands at batch {} of epoch {}, but an epoch here has {} "
                                        "batches",
                                        batch, state.epoch, num_batches()));
  }
  epoch_ = state.epoch;
  batch_ = batch;
  started_ = false;
}

void SplitLoader::close() {
  if (closed_) return;
  loader_->retire();
  closed_ = true;
}

}  // namespace stoker
