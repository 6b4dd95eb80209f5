#include "recipe/loaders.h"

#include <thread>

#include <torch/torch.h>

#include "common/error.h"
#include "common/log.h"
#include "data/augmented_source.h"
#include "data/batch_ops.h"
#include "data/cache.h"
#include "data/pipeline.h"
#include "data/random.h"
#include "data/sampler.h"

namespace stoker {

namespace {
// The split's samples read (and decoded) once into memory, as data.cache asks.
std::shared_ptr<data::Dataset> cached(const Config& config, std::shared_ptr<data::Dataset> dataset,
                                      const std::string& split) {
  data::CacheOptions o;
  o.set_level(data::cache_level_of(config.data.cache));
  o.set_fill_threads(std::max<int64_t>(1, std::thread::hardware_concurrency()));
  o.max_image_pixels = config.data.max_image_pixels;
  std::shared_ptr<data::CachedDataset> cache;
  try {
    cache = std::make_shared<data::CachedDataset>(std::move(dataset), o);
  } catch (const Error& e) {
    throw Error(fmt::format("data.cache: {}: every sample of the {} split must load to be cached; remove it, or "
                            "set data.cache: none to skip bad samples instead",
                            e.what(), split));
  }
  logger().info("data.cache: {} {} samples of the {} split in memory ({:.1f} MB, {:.1f} s to fill)",
                data::cache_level_name(cache->level()), cache->size(), split,
                static_cast<double>(cache->bytes()) / 1e6, cache->fill_seconds());
  return cache;
}
// A list of transforms in short: "resize 256, center_crop 224".
std::string describe_transforms(const std::vector<TypedOptions>& transforms) {
  std::string out;
  for (const TypedOptions& t : transforms) {
    if (!out.empty()) out += ", ";
    out += t.type();
    const int64_t size = data::output_size_of({t});
    if (size > 0) out += fmt::format(" {}", size);
  }
  return out;
}
}  // namespace

std::shared_ptr<data::Dataset> make_dataset(const Config& config, const std::string& split,
                                            const std::vector<std::string>& class_names, const std::string& source) {
  const DataOptions& d = config.data;
  data::DatasetOptions o = data::dataset_options(d, split, config.run.seed);
  o.class_names = class_names;
  o.class_names_source = source;
  std::shared_ptr<data::Dataset> dataset = data::create_dataset(o);
  if (d.cache != data::DataCache::kNone) dataset = cached(config, std::move(dataset), split);
  STOKER_CHECK(d.num_classes == 0 || dataset->num_classes() == d.num_classes,
               "the {} data has {} classes but data.num_classes is {}; make them agree, or leave data.num_classes "
               "out to take it from the data",
               split, dataset->num_classes(), d.num_classes);
  return dataset;
}

std::shared_ptr<data::Loader> make_loader(const Config& config, std::shared_ptr<data::Dataset> dataset,
                                          torch::Device device, const std::string& split, bool output_uint8,
                                          const DataRanks& ranks) {
  data::LoaderContext context;
  context.rank = ranks.rank;
  context.world_size = ranks.world_size;
  context.step_batches = ranks.step_batches;
  context.seed = config.run.seed;
  context.device = device;
  context.channels_last = config.train.channels_last;
  // Mixed and bf16-true precision get their inputs in the compute dtype straight from the loader
  // (half the bytes; autocast would round them to it anyway at the first layer).
  const Precision precision = config.train.precision;
  if (is_mixed(precision) || precision == Precision::kBf16True) {
    context.input_dtype = is_mixed(precision) ? autocast_dtype(precision) : parameter_dtype(precision);
  }
  context.output_uint8 = output_uint8;
  context.warn = [](const std::string& message) { logger().warn("{}", message); };
  const data::LoaderOptions l = data::loader_options(config.data, split, context);
  return std::make_shared<data::Loader>(std::move(dataset), l);
}

std::shared_ptr<data::Loader> make_loader(const Config& config, torch::Device device,
                                          const std::string& split, bool output_uint8) {
  DataRanks alone;
  alone.step_batches = batch_arithmetic(config).accumulate_steps;
  return make_loader(config, make_dataset(config, split), device, split, output_uint8, alone);
}

DataRanks data_ranks(const RunPlan& plan) { return {plan.rank, plan.world_size, plan.batches.accumulate_steps}; }

int64_t training_batches_per_epoch(const Config& config, const data::Dataset& train, const DataRanks& ranks) {
  data::LoaderContext context;
  context.rank = ranks.rank;
  context.world_size = ranks.world_size;
  context.step_batches = ranks.step_batches;
  context.seed = config.run.seed;
  const data::LoaderOptions o = data::loader_options(config.data, "train", context);
  const int64_t per_rank = train.size() / std::max<int64_t>(1, ranks.world_size);
  STOKER_CHECK(!config.data.drop_last || per_rank >= config.data.batch_size,
               "data.batch_size ({}) is more than the {} training samples{}: with data.drop_last an epoch would have "
               "no batch; lower data.batch_size to at most {}, or set data.drop_last: false to train on one partial "
               "batch",
               config.data.batch_size, per_rank,
               ranks.world_size > 1 ? fmt::format(" each of the {} ranks has", ranks.world_size) : std::string(""),
               per_rank);
  return data::Sampler(train.size(), o.sampler()).num_batches();
}

namespace {
data::BatchOpContext batch_op_context(const Config& config, int64_t rank) {
  data::BatchOpContext c;
  c.seed = data::mix_seed(config.run.seed, static_cast<uint64_t>(rank));
  c.num_classes = config.data.num_classes;
  c.label_smoothing = config.train.label_smoothing;
  c.batch_size = config.data.batch_size;
  return c;
}
}  // namespace

std::shared_ptr<data::BatchSource> augment_training(const Config& config, std::shared_ptr<data::BatchSource> train,
                                                    int64_t rank) {
  if (config.data.batch_ops.empty()) return train;
  std::vector<data::BatchOp> ops;
  try {
    ops = data::make_batch_ops(config.data.batch_ops, batch_op_context(config, rank));
  } catch (const Error& e) {
    throw Error(fmt::format("data.{}", e.what()));
  }
  return std::make_shared<data::AugmentedSource>(std::move(train), std::move(ops));
}

std::vector<std::string> describe_training_augment(const Config& config) {
  std::vector<std::string> lines;
  const data::ResolutionSchedule& r = config.data.resolution_schedule;
  if (r.enabled()) {
    lines.push_back(fmt::format("data.resolution_schedule: training crops of {} to {} pixels, linear from epoch {} "
                                "to {} (counted from 0) in multiples of {}: {}",
                                r.start_size, r.end_size, r.start_epoch, r.end_epoch, r.step,
                                r.describe(config.train.epochs)));
  }
  if (config.data.eval_size > 0) {
    lines.push_back(fmt::format("data.eval_size: evaluation crops of {} pixels (data.eval_transforms as {})",
                                config.data.eval_size, describe_transforms(data::eval_transforms_of(config.data))));
  }
  for (std::string& line : data::describe_batch_ops(config.data.batch_ops, batch_op_context(config, 0))) {
    lines.push_back(std::move(line));
  }
  return lines;
}

data::InputShape input_shape(const Config& config, std::shared_ptr<data::Dataset> train) {
  data::LoaderContext context;
  context.warn = [](const std::string& message) { logger().warn("{}", message); };
  const data::SamplePipeline pipeline(std::move(train), data::loader_options(config.data, "train", context).pipeline());
  return {pipeline.channels(), pipeline.out_height(), pipeline.out_width()};
}

namespace {
Loaders make_loaders(const Config& config, torch::Device device, std::shared_ptr<data::Dataset> train,
                     const DataRanks& ranks) {
  Loaders loaders;
  const std::vector<std::string> classes = train->class_names();  // the test split's labels follow them
  loaders.train = make_loader(config, std::move(train), device, "train", false, ranks);
  loaders.test = make_loader(config, make_dataset(config, "test", classes), device, "test", false, ranks);
  // Training and evaluation at sizes of their own is asked for with data.eval_size or
  // data.resolution_schedule; otherwise two sizes are a mistake in the transforms.
  const bool own_sizes = config.data.eval_size > 0 || config.data.resolution_schedule.enabled();
  STOKER_CHECK(own_sizes || (loaders.train->out_height() == loaders.test->out_height() &&
                             loaders.train->out_width() == loaders.test->out_width()),
               "training batches are {}x{} but evaluation batches are {}x{}; make data.train_transforms "
               "and data.eval_transforms end at the same size, or set data.eval_size to evaluate at a size of its own",
               loaders.train->out_height(), loaders.train->out_width(), loaders.test->out_height(),
               loaders.test->out_width());
  loaders.pinned = loaders.train->pinned();
  loaders.in_channels = loaders.train->channels();
  return loaders;
}

}  // namespace

Loaders make_loaders(const Config& config, torch::Device device) {
  DataRanks alone;
  alone.step_batches = batch_arithmetic(config).accumulate_steps;
  return make_loaders(config, device, make_dataset(config, "train"), alone);
}

Loaders make_loaders(const RunPlan& plan) {
  STOKER_CHECK(plan.train_set != nullptr, "make_loaders: the plan has no training split (a plan of an application's "
               "own batch source); build the loaders from the config");
  return make_loaders(plan.config, plan.device, plan.train_set, data_ranks(plan));
}

}  // namespace stoker
