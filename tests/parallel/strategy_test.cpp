// The strategy registry and what every strategy shares (parallel/strategy.h): the names a recipe may
// give, the refusals that say what to set, and each rank's own random stream (rank_seed, and again
// after a checkpoint put rank 0's generators on every rank).
#include "parallel/strategy.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>

#include "distributed/thread_ranks.h"
#include "test_util.h"

namespace stoker::parallel {
namespace {

TEST(StrategyRegistry, KnowsSingleDdpAndZero1AndListsThemForAnUnknownName) {
  const std::vector<std::string> names = strategy_registry().names();
  for (const char* name : {"single", "ddp", "zero1"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
  EXPECT_CONTAINS(testing::error_of([] { make_strategy("zero3", {}); }),
                  "unknown distributed.strategy type 'zero3'; known: ddp, single, zero1");
}

TEST(StrategyRegistry, SingleAloneAnswersWithThisProcesssNumbers) {
  const auto single = make_strategy("single", {});
  EXPECT_EQ(single->world_size(), 1);
  EXPECT_EQ(single->graph_obstacle(), "");
  std::vector<double> means = {0.1, 0.7}, counts = {3, 1};
  single->weighted_means(means, counts);
  EXPECT_EQ(means, (std::vector<double>{0.1, 0.7}));  // as it is, not 3 x 0.1 / 3
  EXPECT_EQ(single->any({true, false}), (std::vector<bool>{true, false}));
  const torch::Tensor loss = torch::tensor(2.5);
  EXPECT_TRUE(single->mean(loss).is_same(loss));
}

TEST(StrategyRegistry, ADataParallelStrategyNeedsRanksAndSingleRefusesSeveral) {
  EXPECT_CONTAINS(testing::error_of([] { make_strategy("ddp", {}); }),
                  "distributed.strategy: ddp needs the ranks' process group");
  testing::run_ranks(2, [](distributed::ProcessGroup& group) {
    StrategyContext context;
    context.group = testing::borrowed(group);
    EXPECT_CONTAINS(testing::error_of([&] { make_strategy("single", context); }),
                    "distributed.strategy: single trains one process, but this run has 2 ranks");
  });
}

// A strategy that says it is rank `rank` (the base's generators_restored reads nothing else).
class RankOnly final : public Strategy {
 public:
  explicit RankOnly(int64_t rank) : rank_(rank) {}
  std::string name() const override { return "rank only"; }
  int64_t rank() const override { return rank_; }

 private:
  int64_t rank_;
};

torch::Tensor draw_after_restore(int64_t rank) {
  torch::manual_seed(11);  // what a checkpoint restored: rank 0's generator, on every rank
  RankOnly(rank).generators_restored();
  return torch::rand({4});
}

TEST(RankSeeds, EachRankDrawsItsOwnStreamAndRankZeroKeepsTheRunsSeed) {
  EXPECT_EQ(rank_seed(42, 0), 42u);  // one process and rank 0: run.seed's stream, as before
  EXPECT_NE(rank_seed(42, 1), rank_seed(42, 0));
  torch::manual_seed(11);
  const torch::Tensor kept = torch::rand({4});
  EXPECT_TRUE(draw_after_restore(0).equal(kept));  // rank 0 goes on with the stream it saved
  const torch::Tensor one = draw_after_restore(1), two = draw_after_restore(2);
  EXPECT_FALSE(one.equal(kept));
  EXPECT_FALSE(one.equal(two));
  EXPECT_TRUE(draw_after_restore(1).equal(one));  // and each rank's stream is the same at every resume
}

}  // namespace
}  // namespace stoker::parallel
