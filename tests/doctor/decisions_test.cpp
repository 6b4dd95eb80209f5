// doctor/decisions.h on recorded measurements: the knee of a batch sweep with its learning rate
// (DoctorKnee) and the performance contract (DoctorContract). No timing here.
#include "doctor/decisions.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "optim/optim.h"
#include "test_util.h"

namespace stoker {
namespace {

// `extra`: more top-level YAML; `optimizer_extra`: more keys of optimizer (", key: value").
Config recipe(const std::string& optimizer, int64_t batch, double lr, const std::string& extra = "",
              const std::string& optimizer_extra = "") {
  return parse_config(fmt::format(R"(
data: {{type: synthetic, batch_size: {}}}
optimizer: {{type: {}, lr: {}{}}}
{})",
                                  batch, optimizer, lr, optimizer_extra, extra),
                      "knee_test.yaml");
}

std::vector<BatchTrial> sweep(const std::vector<std::pair<int64_t, double>>& measured) {
  std::vector<BatchTrial> trials;
  for (const auto& [batch, rate] : measured) {
    BatchTrial t;
    t.batch_size = batch;
    t.samples_per_s = rate;
    t.fits = rate > 0;
    trials.push_back(t);
  }
  return trials;
}

std::string all(const BatchChoice& c) { return fmt::format("{}", fmt::join(c.lines, "\n")); }

// A CPU sweep of compact_resnet (the shape of the one in docs/BENCHMARKS.md): large gains up to 64,
// then a few percent per doubling.
const std::vector<std::pair<int64_t, double>> kCpuSweep = {{8, 180}, {16, 290}, {32, 380}, {64, 430}, {128, 445},
                                                           {256, 452}, {512, 455}};

TEST(DoctorKnee, StopsWhereADoublingGainsLessThanTheKnee) {
  const BatchChoice c = choose_batch(recipe("sgd", 64, 0.05), sweep(kCpuSweep), 0.1);
  // 32 -> 64 gains 13.2%, 64 -> 128 gains 3.5%: the knee is 64, not the fastest (512).
  EXPECT_EQ(c.batch_size, 64) << all(c);
  EXPECT_CONTAINS(all(c), "knee at batch 64: no larger batch gains 10.0% samples/s per doubling over it (the most: "
                          "batch 128, 3.5%, 430.0 -> 445.0)");
  EXPECT_FALSE(c.lr.changed);  // the recipe's own batch: the rate stays
  EXPECT_EQ(c.set_line(), "--set data.batch_size=64");
  // A stricter knee goes further; a looser one stops earlier.
  EXPECT_EQ(choose_batch(recipe("sgd", 64, 0.05), sweep(kCpuSweep), 0.03).batch_size, 128);
  EXPECT_EQ(choose_batch(recipe("sgd", 64, 0.05), sweep(kCpuSweep), 0.3).batch_size, 32);
}

TEST(DoctorKnee, EveryDoublingPaysTakesTheLargestThatFits) {
  const BatchChoice c = choose_batch(recipe("sgd", 32, 0.1), sweep({{32, 1000}, {64, 1900}, {128, 3500}, {256, 0}}));
  EXPECT_EQ(c.batch_size, 128) << all(c);
  EXPECT_CONTAINS(all(c), "every smaller batch had a larger one gaining at least 10.0% samples/s per doubling: the "
                          "largest measured, batch 128");
  // Linear scaling for SGD: 0.1 x 128/32.
  EXPECT_TRUE(c.lr.changed);
  EXPECT_DOUBLE_EQ(c.lr.lr, 0.4);
  EXPECT_EQ(c.set_line(), "--set data.batch_size=128 --set optimizer.lr=0.4");
}

TEST(DoctorKnee, AGapInTheSweepCountsGainPerDoubling) {
  // 16 -> 64 is two doublings: 1.21x over two is 10% per doubling, at the knee of 10%: it goes on.
  const BatchChoice c = choose_batch(recipe("sgd", 16, 0.1), sweep({{16, 100}, {64, 121.0001}, {128, 122}}));
  EXPECT_EQ(c.batch_size, 64) << all(c);
}

TEST(DoctorKnee, ASlowMeasurementOnTheWayUpDoesNotStopTheWalk) {
  // 16 measured slow (a busy machine): 32 still triples 8's samples/s, so the knee is past both.
  EXPECT_EQ(choose_batch(recipe("sgd", 8, 0.1), sweep({{8, 100}, {16, 90}, {32, 300}, {64, 310}})).batch_size, 32);
}

TEST(DoctorKnee, TheLearningRateFollowsTheRecipesRule) {
  // The Adam family: the square root of the ratio.
  const LrRescale adam = rescale_lr(recipe("adamw", 64, 0.001), 256);
  EXPECT_DOUBLE_EQ(adam.lr, 0.002);
  EXPECT_CONTAINS(adam.rule, "square-root scaling for adamw (its type's rule)");
  // SGD: linear, down as well as up.
  EXPECT_DOUBLE_EQ(rescale_lr(recipe("sgd", 64, 0.1), 16).lr, 0.025);
  // optimizer.lr_reference_batch: the run scales it itself, so optimizer.lr is not set.
  const LrRescale reference = rescale_lr(recipe("sgd", 64, 0.1, "", ", lr_reference_batch: 256"), 128);
  EXPECT_FALSE(reference.changed);
  EXPECT_DOUBLE_EQ(reference.lr, 0.1);
  EXPECT_CONTAINS(reference.rule, "optimizer.lr_reference_batch is 256: the run scales optimizer.lr linearly");
  EXPECT_CONTAINS(reference.rule, "effective 0.05 at batch 128");
}

// The rule is the optimizer type's (OptimizerType::lr_scaling), not a guess from its name: an
// application's optimizer says its own, and one that says none keeps optimizer.lr.
TEST(DoctorKnee, TheRuleIsTheOptimizerTypes) {
  for (const auto& [name, scaling] : {std::pair<std::string, LrScaling>{"test_adam_linear", LrScaling::kLinear},
                                      {"test_unknown_rule", LrScaling::kNone}}) {
    if (!optimizer_registry().contains(name)) {
      OptimizerType type = optimizer_registry().get("adamw");
      type.lr_scaling = scaling;
      optimizer_registry().add(name, type);
    }
  }
  EXPECT_DOUBLE_EQ(rescale_lr(recipe("test_adam_linear", 64, 0.001), 256).lr, 0.004);
  EXPECT_CONTAINS(rescale_lr(recipe("test_adam_linear", 64, 0.001), 256).rule, "linear scaling for test_adam_linear");
  const LrRescale none = rescale_lr(recipe("test_unknown_rule", 64, 0.001), 256);
  EXPECT_DOUBLE_EQ(none.lr, 0.001);
  EXPECT_FALSE(none.changed);
  EXPECT_CONTAINS(none.rule, "no scaling rule is known for optimizer.type test_unknown_rule");
  EXPECT_EQ(optimizer_registry().get("lamb").lr_scaling, LrScaling::kSqrt);
}

TEST(DoctorKnee, AnEffectiveBatchSizeKeepsTheRateAndOnlyItsDivisorsAreChosen) {
  const Config c = recipe("sgd", 32, 0.1, "train: {effective_batch_size: 256}");
  const BatchChoice choice = choose_batch(c, sweep({{32, 100}, {64, 150}, {128, 200}, {512, 400}}));
  EXPECT_EQ(choice.batch_size, 128) << all(choice);  // 512 does not divide 256
  EXPECT_CONTAINS(all(choice), "batch 512 left out: train.effective_batch_size (256) must be a multiple of data.batch_size x data.shard_count (512 x 1 = 512)");
  EXPECT_FALSE(choice.lr.changed);
  EXPECT_CONTAINS(choice.lr.rule, "keeps 256 samples per optimizer step");
  EXPECT_EQ(choice.set_line(), "--set data.batch_size=128");
}

TEST(DoctorKnee, SizesThatAreNeitherAPowerOfTwoNorAMultipleOf8AreLeftOut) {
  const BatchChoice c = choose_batch(recipe("sgd", 12, 0.1), sweep({{12, 100}, {24, 300}, {48, 320}}));
  EXPECT_EQ(c.batch_size, 24) << all(c);
  EXPECT_CONTAINS(all(c), "batch 12 left out: neither a power of two nor a multiple of 8");
  EXPECT_DOUBLE_EQ(c.lr.lr, 0.2);
}

TEST(DoctorKnee, NothingThatFitsChoosesNothingAndABadKneeIsAnError) {
  const BatchChoice none = choose_batch(recipe("sgd", 64, 0.1), sweep({{8, 0}}));
  EXPECT_EQ(none.batch_size, 0);
  EXPECT_EQ(none.set_line(), "");
  EXPECT_CONTAINS(all(none), "no batch size fits");
  EXPECT_CONTAINS(stoker::testing::error_of([] { choose_batch(recipe("sgd", 64, 0.1), sweep(kCpuSweep), 0); }),
                  "--knee must be positive");
}

// ---- the performance contract ----------------------------------------------------------------------

RungResult measured(const std::string& name, double samples_per_s) {
  RungResult r;
  r.name = name;
  r.samples_per_s = samples_per_s;
  return r;
}

TEST(DoctorContract, TheFullRungAgainstTheCeilingDecides) {
  // The starved toy as measured on 2 cores (docs/doctor.md): 183 of 347 samples/s.
  const std::vector<RungResult> starved = {measured("device-cached", 346.6), measured("decoded-cached", 346.3),
                                           measured("raw-cached", 354.9), measured("full", 183.2)};
  const ContractVerdict broken = check_contract(starved);
  EXPECT_FALSE(broken.kept);
  EXPECT_NEAR(broken.ratio, 183.2 / 346.6, 1e-12);
  EXPECT_EQ(broken.line,
            "contract broken: the full pipeline trains 183.2 samples/s, 0.53 of the device-cached ceiling of 346.6 "
            "(below the minimum of 0.90)");
  EXPECT_TRUE(check_contract(starved, 0.5).kept);
  // Fed: the raw cache (tuned) at the ceiling.
  const ContractVerdict fed = check_contract({measured("device-cached", 366.8), measured("full", 340.0)});
  EXPECT_TRUE(fed.kept);
  EXPECT_CONTAINS(fed.line, "contract kept");
  EXPECT_CONTAINS(fed.line, "at or above the minimum of 0.90");
  // Exactly at the minimum keeps it.
  EXPECT_TRUE(check_contract({measured("device-cached", 100), measured("full", 90)}, 0.9).kept);
}

TEST(DoctorContract, AMissingRungBreaksItAndSaysWhich) {
  RungResult full = measured("full", 100);
  full.measured = false;
  const ContractVerdict v = check_contract({measured("device-cached", 200), full});
  EXPECT_FALSE(v.kept);
  EXPECT_CONTAINS(v.line, "no measured full rung");
  EXPECT_CONTAINS(check_contract({measured("full", 100)}).line, "no measured device-cached rung");
  EXPECT_CONTAINS(stoker::testing::error_of([] { check_contract({}, 1.5); }), "--min-ratio must be in (0, 1]");
}

}  // namespace
}  // namespace stoker
