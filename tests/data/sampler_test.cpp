#include "data/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "common/error.h"
#include "test_util.h"

namespace stoker::data {
namespace {

std::vector<int64_t> samples_of(const SampledBatch& b) {
  std::vector<int64_t> out;
  for (int64_t s = 0; s < b.count; ++s) out.push_back(b.sample(s));
  return out;
}

// Every batch of `epoch`, flattened.
std::vector<int64_t> epoch_of(Sampler& sampler, int64_t epoch, int64_t first = 0) {
  sampler.start_epoch(epoch, first);
  std::vector<int64_t> out;
  while (auto b = sampler.next()) {
    for (int64_t s : samples_of(*b)) out.push_back(s);
  }
  return out;
}

// The shuffle is pinned: a change would silently change every run's batches. The expected orders
// come from an independent Python transcription of the shuffle (splitmix64 Fisher-Yates).
TEST(Sampler, TheShuffleIsPinned) {
  const auto order = [](int64_t n, uint64_t seed, int64_t epoch) {
    return Sampler(n, SamplerOptions().set_batch_size(1).set_seed(seed)).epoch_samples(epoch)->samples;
  };
  EXPECT_EQ(order(10, 0, 0), (std::vector<int64_t>{4, 2, 7, 3, 0, 9, 1, 6, 5, 8}));
  EXPECT_EQ(order(10, 5, 3), (std::vector<int64_t>{5, 6, 9, 3, 2, 8, 1, 7, 4, 0}));
  EXPECT_EQ(order(12, 1, 2), (std::vector<int64_t>{8, 5, 9, 7, 3, 4, 10, 1, 6, 2, 11, 0}));
  Sampler plain(5, SamplerOptions().set_batch_size(2).set_shuffle(false));
  EXPECT_EQ(plain.epoch_samples(7)->samples, (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST(Sampler, BatchesFollowDropLast) {
  Sampler dropping(10, SamplerOptions().set_batch_size(4));
  EXPECT_EQ(dropping.num_batches(), 2);
  EXPECT_EQ(epoch_of(dropping, 0).size(), 8u);
  Sampler keeping(10, SamplerOptions().set_batch_size(4).set_drop_last(false));
  EXPECT_EQ(keeping.num_batches(), 3);
  keeping.start_epoch(0, 2);
  const auto last = keeping.next();
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->index, 2);
  EXPECT_EQ(last->count, 2);
  EXPECT_FALSE(keeping.next().has_value());
}

TEST(Sampler, PositionIsSavedAndRestored) {
  Sampler a(50, SamplerOptions().set_batch_size(5).set_seed(3));
  const auto full = epoch_of(a, 4);
  a.start_epoch(4);
  for (int k = 0; k < 3; ++k) (void)a.next();
  const SamplerPosition saved = a.position();
  EXPECT_EQ(saved, (SamplerPosition{4, 3}));
  Sampler b(50, SamplerOptions().set_batch_size(5).set_seed(3));  // a resumed run
  b.seek(saved);
  std::vector<int64_t> rest;
  while (auto batch = b.next()) {
    for (int64_t s : samples_of(*batch)) rest.push_back(s);
  }
  EXPECT_EQ(rest, std::vector<int64_t>(full.begin() + 15, full.end()));
  EXPECT_CONTAINS(stoker::testing::error_of([&] { b.seek({4, 11}); }), "cannot start at batch 11 of an epoch of 10");
}

TEST(Sampler, ShardsCoverAnEpochExactlyOnce) {
  std::multiset<int64_t> seen;
  for (int64_t rank = 0; rank < 3; ++rank) {
    Sampler s(50, SamplerOptions().set_batch_size(4).set_drop_last(false).set_seed(9).set_rank(rank).set_world_size(3));
    EXPECT_EQ(s.num_samples(), rank < 2 ? 17 : 16);
    for (int64_t id : epoch_of(s, 2)) seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 50u);
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 50u);
}

// Distributed training: every rank must take the same number of steps.
TEST(Sampler, EvenShardsGiveEveryRankTheSameBatches) {
  for (bool drop_last : {true, false}) {
    std::multiset<int64_t> seen;
    for (int64_t rank = 0; rank < 3; ++rank) {
      Sampler s(50, SamplerOptions()
                        .set_batch_size(4)
                        .set_drop_last(drop_last)
                        .set_seed(9)
                        .set_rank(rank)
                        .set_world_size(3)
                        .set_even_shards(true));
      EXPECT_EQ(s.num_samples(), drop_last ? 16 : 17) << "rank " << rank;
      EXPECT_EQ(s.num_batches(), drop_last ? 4 : 5) << "rank " << rank;
      for (int64_t id : epoch_of(s, 2)) seen.insert(id);
    }
    const std::set<int64_t> distinct(seen.begin(), seen.end());
    if (drop_last) {
      EXPECT_EQ(seen.size(), 48u);  // 3 ranks x 4 batches x 4 samples, none twice
      EXPECT_EQ(distinct.size(), 48u);
    } else {
      EXPECT_EQ(seen.size(), 51u);  // one sample repeated to fill the last rank
      EXPECT_EQ(distinct.size(), 50u);
    }
  }
}

TEST(Sampler, RejectsBadOptions) {
  using stoker::testing::error_of;
  EXPECT_CONTAINS(error_of([] { Sampler(10, SamplerOptions().set_rank(2).set_world_size(2)); }),
                  "shard rank 2 of 2 is out of range");
  EXPECT_CONTAINS(error_of([] { Sampler(10, SamplerOptions().set_batch_size(0)); }), "batch_size must be positive");
  EXPECT_CONTAINS(error_of([] { Sampler(10, SamplerOptions().set_batch_size(16)); }),
                  "10 samples are fewer than one batch of 16 with drop_last");
  EXPECT_CONTAINS(error_of([] { Sampler(0, SamplerOptions()); }), "the data set is empty");
}

}  // namespace
}  // namespace stoker::data
