// Batch operations by type (data.batch_ops): operations on whole training batches on the device,
// after normalisation and before the step, each a registered type with its own keys, listed in
// order like data.train_transforms:
//   batch_ops: [{type: random_erasing, probability: 0.25, mode: pixel},
//               {type: mixup, mixup_alpha: 0.1, cutmix_alpha: 1.0}]
// random_erasing (data/random_erasing.h) and mixup (Mixup/CutMix, data/mixup.h) are Stoker's own; an
// application registers another the same way, and its keys are then read, checked and written like
// these:
//   data::batch_op_registry().add("my_noise", {options_of<MyNoiseOptions>(),
//       [](const TypedOptions& o, const data::BatchOpContext& c) -> data::BatchOp { ... },
//       [](const TypedOptions& o, const data::BatchOpContext&) { return std::string("my noise"); }});
// The recipe wraps the training source in an AugmentedSource with the listed operations
// (recipe/loaders.h augment_training); evaluation sources are never wrapped.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/options.h"
#include "common/registry.h"
#include "data/augmented_source.h"

namespace stoker::data {

// What the run hands every batch operation: derived from the config, never set in data.batch_ops.
struct BatchOpContext {
  uint64_t seed = 0;          // the run's seed mixed with this process's rank
  int64_t num_classes = 0;    // data.num_classes
  double label_smoothing = 0; // train.label_smoothing (mixup folds it into its soft targets)
  int64_t batch_size = 0;     // data.batch_size: the samples of one batch on this process
};

// A registered batch operation type: its options, how to build the operation from them (checked),
// and one line for the run's log saying what it does to the batches and to the metrics.
struct BatchOpType {
  OptionsMaker options;
  std::function<BatchOp(const TypedOptions&, const BatchOpContext&)> create;
  std::function<std::string(const TypedOptions&, const BatchOpContext&)> describe;
};
// random_erasing and mixup; applications may register more.
Registry<BatchOpType>& batch_op_registry();

// A batch operation of a registered type with its default options, e.g. for building lists in code:
//   make_batch_op("mixup").as<MixupSettings>().mixup_alpha = 0.2;
TypedOptions make_batch_op(const std::string& type);

// The operations `list` describes, in order, each built by its registered type after its options'
// check(); an error names the operation by position and type ("batch_ops[1] (mixup): ...").
std::vector<BatchOp> make_batch_ops(const std::vector<TypedOptions>& list, const BatchOpContext& context);

// One line per operation for the run's log: "data.batch_ops[0] (random_erasing): probability 0.25 ...".
std::vector<std::string> describe_batch_ops(const std::vector<TypedOptions>& list, const BatchOpContext& context);

}  // namespace stoker::data
