#include "data/settings.h"

#include <cstdlib>

namespace stoker::data {

std::string expand_home(const std::string& path) {
  if (path != "~" && path.rfind("~/", 0) != 0) return path;
  const char* home = std::getenv("HOME");
  return home == nullptr ? path : std::string(home) + path.substr(1);
}

DatasetOptions dataset_options(const DataSettings& s, const std::string& split, uint64_t seed) {
  DatasetOptions o;
  o.type = s.dataset.type();
  o.own = s.dataset;
  o.root = expand_home(s.root);
  o.split = split;
  o.num_classes = s.num_classes;
  o.limit = split == "train" ? s.train_limit : s.test_limit;
  o.seed = seed;
  o.val_split = s.val_split;
  return o;
}

std::vector<TypedOptions> train_transforms_at(const DataSettings& s, int64_t epoch) {
  if (!s.resolution_schedule.enabled()) return s.train_transforms;
  return with_output_size(s.train_transforms, s.resolution_schedule.size_at(epoch), "data.train_transforms");
}

std::vector<TypedOptions> eval_transforms_of(const DataSettings& s) {
  if (s.eval_size == 0) return s.eval_transforms;
  return with_output_size(s.eval_transforms, s.eval_size, "data.eval_transforms");
}

LoaderOptions loader_options(const DataSettings& s, const std::string& split, const LoaderContext& context) {
  const bool train = split == "train";
  LoaderOptions l;
  l.batch_size = train ? s.batch_size : s.eval_batch_size;
  l.shuffle = train && s.shuffle;
  l.drop_last = train && s.drop_last;
  l.workers = s.workers;
  l.prefetch_factor = s.prefetch_factor;
  l.device_prefetch = s.device_prefetch;
  l.pin_memory = s.pin_memory;
  const bool launched = context.world_size > 1;  // the process group's ranks, else sharding by hand
  l.shard_rank = launched ? context.rank : s.shard_rank;
  l.shard_count = launched ? context.world_size : s.shard_count;
  // Distributed training: every rank the same number of training batches, so that no rank waits for
  // a gradient all-reduce the others never start; evaluation covers each sample once.
  l.even_shards = train && l.shard_count > 1;
  l.step_batches = train ? context.step_batches : 1;
  l.repeats = train ? s.repeated_augmentation : 1;
  // Training replaces an unreadable sample with another; evaluation leaves it out (and counts it).
  l.skip_bad_samples = train && s.on_bad_sample == BadSamples::kSkip;
  l.exclude_bad_samples = !train && s.on_bad_sample == BadSamples::kSkip;
  l.max_image_pixels = s.max_image_pixels;
  l.transforms = train ? train_transforms_at(s, context.epoch) : eval_transforms_of(s);
  l.mean = s.mean;
  l.std = s.std;
  l.seed = context.seed;
  l.device = context.device;
  l.input_dtype = context.input_dtype;
  l.channels_last = context.channels_last;
  l.output_uint8 = context.output_uint8;
  l.warn = context.warn;
  return l;
}

}  // namespace stoker::data
