// The configured data as the run loads it: each split's data set (data.type and its keys, cached as
// data.cache asks) and its Loader (data/loader.h) with the split's batch size, order and transforms,
// on the run's device and in its input dtype.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

#include "data/batch_source.h"
#include "data/loader.h"
#include "recipe/config.h"
#include "recipe/run_plan.h"

namespace stoker {

// What the run plan decides for a loader: this process's rank among `world_size` (the process group's;
// derived, never a user key; alone: 0 of 1) and the batches per optimizer step (a training epoch ends
// after its last whole step).
struct DataRanks {
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t step_batches = 1;
};
// The plan's: its rank, world size and accumulation.
DataRanks data_ranks(const RunPlan& plan);

// One split ("train" or "test") of the configured data set (data.type and its keys, data.root, the
// split's limit), checked against data.num_classes (unless 0). `class_names`: the classes it must
// have, by label (the training split's for the test split, a checkpoint's for its evaluation), named
// by `source` in the error when its own differ (data::DatasetOptions::class_names).
std::shared_ptr<data::Dataset> make_dataset(const Config& config, const std::string& split,
                                            const std::vector<std::string>& class_names = {},
                                            const std::string& source = "the training split");
// The loader of one split over `dataset` (which may wrap make_dataset's, e.g. in a cache): the
// split's batch size, shuffling and transforms, and the rest of data.*.
// `output_uint8` hands out the uint8 batches as built (see data::LoaderOptions).
std::shared_ptr<data::Loader> make_loader(const Config& config, std::shared_ptr<data::Dataset> dataset,
                                          torch::Device device, const std::string& split,
                                          bool output_uint8 = false, const DataRanks& ranks = {});
// The same over make_dataset(config, split), alone (accumulation from the config).
std::shared_ptr<data::Loader> make_loader(const Config& config, torch::Device device,
                                          const std::string& split, bool output_uint8 = false);
// This rank's training batches per epoch over `train`, without building the loader (the sampler's
// count); an error naming data.batch_size when the rank's samples are fewer than one batch.
int64_t training_batches_per_epoch(const Config& config, const data::Dataset& train, const DataRanks& ranks);
// The training and test loaders of the plan's data set.
struct Loaders {
  // The training loader at the first epoch's size. make_training drops it (null) once a
  // RetunableLoader around it hands out the training batches (TrainingSetup::train_source).
  std::shared_ptr<data::Loader> train, test;
  int64_t in_channels = 1;
  bool pinned = false;  // the training loader's batch buffers are pinned
};
// Alone, over a new training split (tests, benchmarks).
Loaders make_loaders(const Config& config, torch::Device device);
// The plan's: its training split, this rank's share of each.
Loaders make_loaders(const RunPlan& plan);
// The training source with the configured batch operations on the device (data.batch_ops, in
// order), or `train` itself when there are none; their draws are seeded from run.seed and this
// process's `rank`.
std::shared_ptr<data::BatchSource> augment_training(const Config& config, std::shared_ptr<data::BatchSource> train,
                                                    int64_t rank = 0);
// What those operations do to the training batches and metrics, and the sizes of the training and
// evaluation crops when data.resolution_schedule or data.eval_size sets them, one line each, for the
// run's log.
std::vector<std::string> describe_training_augment(const Config& config);
// The shape the training loader's batches will have (channels, height, width; height and width 0
// when the transforms do not end at one size), without building the loader.
data::InputShape input_shape(const Config& config, std::shared_ptr<data::Dataset> train);

}  // namespace stoker
