// Batch operations by type (data/batch_ops.h): the registry's entries, building a list in order with
// the context the run hands them, errors naming the operation, and an application's own type.
#include "data/batch_ops.h"

#include <gtest/gtest.h>

#include <fmt/format.h>
#include <torch/torch.h>

#include "common/error.h"
#include "data/mixup.h"
#include "data/random_erasing.h"
#include "test_util.h"

namespace stoker::data {
namespace {

BatchOpContext context() {
  BatchOpContext c;
  c.seed = 7;
  c.num_classes = 10;
  c.label_smoothing = 0.1;
  c.batch_size = 8;
  return c;
}

Batch batch() {
  Batch b;
  b.input = torch::randn({8, 1, 12, 12});
  b.target = torch::arange(8, torch::kLong);
  return b;
}

TEST(BatchOps, TheRegistryHoldsErasingAndMixup) {
  const std::vector<std::string> names = batch_op_registry().names();
  EXPECT_NE(std::find(names.begin(), names.end(), "mixup"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "random_erasing"), names.end());
  EXPECT_CONTAINS(stoker::testing::error_of([] { make_batch_op("cutout"); }), "unknown batch operation type 'cutout'; known: ");
}

TEST(BatchOps, AListIsAppliedInOrderWithTheRunsContext) {
  TypedOptions erasing = make_batch_op("random_erasing"), mixup = make_batch_op("mixup");
  erasing.as<RandomErasingSettings>().probability = 1.0;
  mixup.as<MixupSettings>().mixup_alpha = 0.4;
  const std::vector<BatchOp> ops = make_batch_ops({erasing, mixup}, context());
  ASSERT_EQ(ops.size(), 2u);
  Batch b = batch();
  const torch::Tensor before = b.input.clone();
  for (const BatchOp& op : ops) op(b, 0);
  EXPECT_FALSE(torch::equal(b.input, before));
  EXPECT_EQ(b.target.sizes(), (torch::IntArrayRef{8, 10}));  // soft targets of num_classes
  EXPECT_GE(b.target.min().item<double>(), 0.01 - 1e-7);     // smoothing 0.1 folded in
  const std::vector<std::string> lines = describe_batch_ops({erasing, mixup}, context());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_CONTAINS(lines[0], "data.batch_ops[0] (random_erasing): probability 1 per sample");
  EXPECT_CONTAINS(lines[1], "data.batch_ops[1] (mixup): mixup (alpha 0.4)");
}

TEST(BatchOps, AnOperationThatDoesNothingIsAnErrorNamingIt) {
  EXPECT_CONTAINS(stoker::testing::error_of([] { make_batch_ops({make_batch_op("random_erasing")}, context()); }),
                  "batch_ops[0] (random_erasing): random_erasing does nothing with probability 0");
  TypedOptions mixup = make_batch_op("mixup");
  EXPECT_CONTAINS(stoker::testing::error_of([&] { make_batch_ops({mixup}, context()); }), "batch_ops[0] (mixup): mixup does nothing");
  mixup.as<MixupSettings>().mixup_alpha = 0.2;
  mixup.as<MixupSettings>().mode = "row";
  EXPECT_CONTAINS(stoker::testing::error_of([&] { make_batch_ops({mixup}, context()); }), "mode must be batch, pair or elem, got 'row'");
}

// An application's own operation: its keys through the same options, its op built with the context.
struct ShiftOptions : TypeOptionsOf<ShiftOptions> {
  double by = 1.0;
  void visit(OptionsVisitor& v) override { v.field("by", by, rules::any_number()); }
};

TEST(BatchOps, AnApplicationRegistersItsOwn) {
  if (!batch_op_registry().contains("test_shift")) {
    batch_op_registry().add(
        "test_shift",
        {options_of<ShiftOptions>(),
         [](const TypedOptions& o, const BatchOpContext&) -> BatchOp {
           const double by = o.as<ShiftOptions>().by;
           return [by](Batch& b, int64_t) { b.input = b.input + by; };
         },
         [](const TypedOptions& o, const BatchOpContext&) { return fmt::format("shift by {}", o.as<ShiftOptions>().by); }});
  }
  TypedOptions shift = make_batch_op("test_shift");
  shift.as<ShiftOptions>().by = 2.5;
  Batch b = batch();
  const torch::Tensor before = b.input.clone();
  make_batch_ops({shift}, context())[0](b, 0);
  EXPECT_TRUE(torch::allclose(b.input, before + 2.5));
  EXPECT_EQ(describe_batch_ops({shift}, context())[0], "data.batch_ops[0] (test_shift): shift by 2.5");
}

}  // namespace
}  // namespace stoker::data
