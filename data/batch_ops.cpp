// The batch operation registry (batch_ops.h) and Stoker's two entries, random_erasing and mixup.
#include "data/batch_ops.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/error.h"
#include "data/mixup.h"
#include "data/random_erasing.h"

namespace stoker::data {
namespace {

BatchOp erasing_op(const TypedOptions& o, const BatchOpContext& c) {
  return random_erasing_op(o.as<RandomErasingSettings>(), c.seed, c.batch_size);
}

std::string describe_erasing(const TypedOptions& o, const BatchOpContext&) {
  return fmt::format("{}, on the device after normalisation", o.as<RandomErasingSettings>().describe());
}

BatchOp mix_op(const TypedOptions& o, const BatchOpContext& c) {
  return mixup_op(o.as<MixupSettings>(), c.num_classes, c.label_smoothing, c.seed);
}

std::string describe_mix(const TypedOptions& o, const BatchOpContext& c) {
  return fmt::format("{}; the training targets are soft labels (train.label_smoothing {:g} folded in) and train/loss "
                     "is measured against them; training top-1 is against each sample's dominant label (the larger "
                     "share of its mixed target), the test metrics use the true labels",
                     o.as<MixupSettings>().describe(), c.label_smoothing);
}

void add_stoker_entries(Registry<BatchOpType>& r) {
  // Erasing first in the recipes, as timm erases in the per-sample transforms, before the loop mixes.
  r.add("random_erasing", {options_of<RandomErasingSettings>(), erasing_op, describe_erasing});
  r.add("mixup", {options_of<MixupSettings>(), mix_op, describe_mix});
}

}  // namespace

Registry<BatchOpType>& batch_op_registry() {
  return lazy_registry<BatchOpType, add_stoker_entries>("batch operation");
}

TypedOptions make_batch_op(const std::string& type) {
  return TypedOptions(type, batch_op_registry().get(type).options());
}

std::vector<BatchOp> make_batch_ops(const std::vector<TypedOptions>& list, const BatchOpContext& context) {
  std::vector<BatchOp> ops;
  for (size_t i = 0; i < list.size(); ++i) {
    const TypedOptions& item = list[i];
    try {
      item.options().check();
      ops.push_back(batch_op_registry().get(item.type()).create(item, context));
    } catch (const Error& e) {
      throw Error(fmt::format("batch_ops[{}] ({}): {}", i, item.type(), e.what()));
    }
  }
  return ops;
}

std::vector<std::string> describe_batch_ops(const std::vector<TypedOptions>& list, const BatchOpContext& context) {
  std::vector<std::string> lines;
  for (size_t i = 0; i < list.size(); ++i) {
    const BatchOpType type = batch_op_registry().get(list[i].type());
    const std::string what = type.describe ? type.describe(list[i], context) : std::string("(no description)");
    lines.push_back(fmt::format("data.batch_ops[{}] ({}): {}", i, list[i].type(), what));
  }
  return lines;
}

}  // namespace stoker::data
