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

// Every sample of `epoch`, from batch `first` on, flattened.
std::vector<int64_t> samples_in_epoch(Sampler& sampler, int64_t epoch, int64_t first = 0) {
  std::vector<int64_t> out;
  for (const SampledBatch& b : testing::epoch_of(sampler, epoch, first)) {
    for (int64_t s : samples_of(b)) out.push_back(s);
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
  EXPECT_EQ(samples_in_epoch(dropping, 0).size(), 8u);
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
  const auto full = samples_in_epoch(a, 4);
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
    for (int64_t id : samples_in_epoch(s, 2)) seen.insert(id);
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
      for (int64_t id : samples_in_epoch(s, 2)) seen.insert(id);
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

// The samples of each optimizer step over all ranks: step s is batches [s x steps, (s + 1) x steps)
// of every rank.
std::vector<std::multiset<int64_t>> global_steps(int64_t n, int64_t world, int64_t batch, int64_t steps,
                                                 bool drop_last, const SamplerOptions& base = SamplerOptions()) {
  std::vector<std::multiset<int64_t>> out;
  for (int64_t rank = 0; rank < world; ++rank) {
    Sampler s(n, SamplerOptions(base)
                     .set_batch_size(batch)
                     .set_drop_last(drop_last)
                     .set_seed(5)
                     .set_rank(rank)
                     .set_world_size(world)
                     .set_even_shards(true)
                     .set_step_batches(steps));
    s.start_epoch(3);
    for (int64_t k = 0; auto b = s.next(); ++k) {
      const auto step = static_cast<size_t>(k / steps);
      if (out.size() <= step) out.resize(step + 1);
      for (int64_t id : samples_of(*b)) out[step].insert(id);
    }
  }
  return out;
}

// Batches independent of the world size: 24 samples per optimizer step, cut as 1 x 24, 1 x 8 x 3
// accumulated, 2 x 12, 2 x 4 x 3, 3 x 8, 4 x 6, 4 x 3 x 2 or 6 x 4: every step holds the same samples,
// and the epoch the same whole steps (203 samples: 8 steps, the last 11 samples left out).
TEST(Sampler, EveryOptimizerStepHoldsTheSameSamplesWhateverTheWorldSize) {
  const auto reference = global_steps(203, 1, 24, 1, true);
  ASSERT_EQ(reference.size(), 8u);
  struct Cut { int64_t world, batch, steps; };
  for (const Cut c : {Cut{1, 8, 3}, Cut{2, 12, 1}, Cut{2, 4, 3}, Cut{3, 8, 1}, Cut{4, 6, 1}, Cut{4, 3, 2}, Cut{6, 4, 1}}) {
    const auto cut = global_steps(203, c.world, c.batch, c.steps, true);
    EXPECT_EQ(cut, reference) << c.world << " rank(s) x batch " << c.batch << " x " << c.steps << " accumulated";
  }
  // Without drop_last the whole steps agree too (the last, partial one is padded per world size).
  const auto kept = global_steps(203, 1, 24, 1, false), kept4 = global_steps(203, 4, 6, 1, false);
  ASSERT_EQ(kept.size(), 9u);
  ASSERT_EQ(kept4.size(), 9u);
  EXPECT_TRUE(std::equal(reference.begin(), reference.end(), kept4.begin()));
  EXPECT_EQ(kept.back().size(), 11u);
  EXPECT_EQ(kept4.back().size(), 12u);  // 11 samples split as 3 + 3 + 3 + 3, one repeated
}

// Not only the step: rank r's batch k of N ranks is batch N x k + r of one process accumulating N
// batches of the same size, so that each forward pass (batch norm statistics included) sees the same
// samples.
TEST(Sampler, RankSlicesAreTheBatchesOfOneProcessAccumulating) {
  Sampler alone(100, SamplerOptions().set_batch_size(8).set_seed(5).set_even_shards(true).set_step_batches(2));
  alone.start_epoch(1);
  std::vector<std::vector<int64_t>> batches;
  while (auto b = alone.next()) batches.push_back(samples_of(*b));
  ASSERT_EQ(batches.size(), 12u);  // 6 whole steps of 16 (100 samples: 96 used)
  for (int64_t rank = 0; rank < 2; ++rank) {
    Sampler s(100, SamplerOptions().set_batch_size(8).set_seed(5).set_rank(rank).set_world_size(2).set_even_shards(true));
    s.start_epoch(1);
    for (int64_t k = 0; auto b = s.next(); ++k) {
      EXPECT_EQ(samples_of(*b), batches[static_cast<size_t>(2 * k + rank)]) << "rank " << rank << " batch " << k;
    }
    EXPECT_EQ(s.num_batches(), 6);
  }
}

// With drop_last, gradient accumulation ends the epoch after the last whole step.
TEST(Sampler, DropLastEndsTheEpochAfterTheLastWholeStep) {
  Sampler s(100, SamplerOptions().set_batch_size(8).set_step_batches(3));
  EXPECT_EQ(s.num_batches(), 12);  // 12 batches of 8 make 4 steps of 24; the 13th would start a fifth
  Sampler kept(100, SamplerOptions().set_batch_size(8).set_step_batches(3).set_drop_last(false));
  EXPECT_EQ(kept.num_batches(), 13);
}

// ---- the shard-locality order (shard_window) ----------------------------------------------------------

// Shards of uneven sizes (84 samples in 10 shards) and the shard each sample sits in.
const std::vector<int64_t> kShardEnds = {7, 20, 25, 35, 44, 55, 58, 70, 78, 84};
int64_t shard_of(int64_t sample) {
  return std::upper_bound(kShardEnds.begin(), kShardEnds.end(), sample) - kShardEnds.begin();
}
SamplerOptions windowed(int64_t window) { return SamplerOptions().set_seed(11).set_shard_window(kShardEnds, window); }

// Pinned by an independent Python transcription (splitmix64 Fisher-Yates over the shards, then over
// the samples of each group): shards [0, 3), [3, 5), [5, 9), [9, 12), two to a group.
TEST(SamplerShardWindow, TheOrderIsPinned) {
  const auto order = [](uint64_t seed, int64_t epoch) {
    return Sampler(12, SamplerOptions().set_batch_size(1).set_seed(seed).set_shard_window({3, 5, 9, 12}, 2))
        .epoch_samples(epoch)->samples;
  };
  EXPECT_EQ(order(0, 0), (std::vector<int64_t>{2, 11, 10, 9, 0, 1, 7, 4, 6, 5, 3, 8}));
  EXPECT_EQ(order(7, 1), (std::vector<int64_t>{10, 11, 5, 7, 6, 9, 8, 3, 0, 4, 2, 1}));
  // Without shuffling (evaluation) the order is the samples' own.
  Sampler plain(12, SamplerOptions().set_batch_size(1).set_shuffle(false).set_shard_window({3, 5, 9, 12}, 2));
  EXPECT_EQ(plain.epoch_samples(3)->samples, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
}

// Each epoch's order is a permutation made of runs, one per group of `window` shards, that hold
// every sample of their shards and no other; a stretch no longer than a group touches at most
// 2 x window shards.
TEST(SamplerShardWindow, APermutationWhoseGroupsReadAtMostWindowShards) {
  for (int64_t window : {1, 3, 4}) {
    std::set<std::vector<int64_t>> orders;
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      const auto order = Sampler(84, windowed(window).set_batch_size(1)).epoch_samples(epoch)->samples;
      std::vector<int64_t> sorted = order;
      std::sort(sorted.begin(), sorted.end());
      for (int64_t i = 0; i < 84; ++i) ASSERT_EQ(sorted[i], i) << "window " << window << " epoch " << epoch;
      orders.insert(order);
      // Walk the order: a group ends when every sample of the shards it opened has been seen.
      std::vector<int64_t> groups;  // shards per group
      std::set<int64_t> open;
      int64_t left = 0, length = 0, shortest = 84;
      for (int64_t id : order) {
        const int64_t s = shard_of(id);
        if (open.insert(s).second) left += kShardEnds[s] - (s == 0 ? 0 : kShardEnds[s - 1]);
        ++length;
        if (--left == 0) {
          groups.push_back(static_cast<int64_t>(open.size()));
          shortest = std::min(shortest, length);
          open.clear();
          length = 0;
        }
      }
      const int64_t whole = 10 / window, rest = 10 % window;
      ASSERT_EQ(static_cast<int64_t>(groups.size()), whole + (rest > 0 ? 1 : 0)) << "window " << window;
      for (size_t g = 0; g < groups.size(); ++g) {
        EXPECT_EQ(groups[g], g < static_cast<size_t>(whole) ? window : rest) << "window " << window << " group " << g;
      }
      // A stretch no longer than the shortest group spans at most two groups.
      for (size_t i = 0; i + shortest <= order.size(); ++i) {
        std::set<int64_t> touched;
        for (size_t j = i; j < i + shortest; ++j) touched.insert(shard_of(order[j]));
        EXPECT_LE(static_cast<int64_t>(touched.size()), 2 * window) << "positions " << i << "..";
      }
    }
    EXPECT_EQ(orders.size(), 3u) << "window " << window << ": the epochs' orders must differ";
  }
  // Within a group the samples are shuffled, not left in shard order.
  const auto one = Sampler(84, windowed(1).set_batch_size(1)).epoch_samples(0)->samples;
  EXPECT_FALSE(std::is_sorted(one.begin(), one.begin() + (kShardEnds[shard_of(one[0])] -
                                                          (shard_of(one[0]) == 0 ? 0 : kShardEnds[shard_of(one[0]) - 1]))));
}

// The order is cut as any other: every optimizer step holds the same samples for any world size
// and accumulation, repeated augmentation included, and a resumed epoch continues exactly.
TEST(SamplerShardWindow, StepsAreTheSameWhateverTheWorldSizeAndResumeIsExact) {
  for (int64_t repeats : {1, 3}) {
    const SamplerOptions base = windowed(3).set_repeats(repeats);
    const auto reference = global_steps(84, 1, 12, 1, true, base);
    ASSERT_EQ(reference.size(), 7u);
    EXPECT_NE(reference, global_steps(84, 1, 12, 1, true, SamplerOptions().set_seed(11).set_repeats(repeats)))
        << "the shard-window order must differ from the global one";
    EXPECT_EQ(global_steps(84, 2, 6, 1, true, base), reference) << "repeats " << repeats;
    EXPECT_EQ(global_steps(84, 3, 2, 2, true, base), reference) << "repeats " << repeats;
    EXPECT_EQ(global_steps(84, 1, 4, 3, true, base), reference) << "repeats " << repeats;
  }
  Sampler whole(84, windowed(3).set_batch_size(4));
  const auto full = samples_in_epoch(whole, 5);
  Sampler resumed(84, windowed(3).set_batch_size(4));
  EXPECT_EQ(samples_in_epoch(resumed, 5, 7), std::vector<int64_t>(full.begin() + 28, full.end()));
}

TEST(SamplerShardWindow, RejectsShardsThatDoNotCoverTheDataSet) {
  using stoker::testing::error_of;
  EXPECT_CONTAINS(error_of([] { Sampler(10, SamplerOptions().set_batch_size(2).set_shard_window({4, 8}, 2)); }),
                  "their ends (8) must end at its 10 samples");
  EXPECT_CONTAINS(error_of([] { Sampler(10, SamplerOptions().set_batch_size(2).set_shard_window({}, 2)); }),
                  "their ends (none)");
  EXPECT_CONTAINS(error_of([] { Sampler(10, SamplerOptions().set_batch_size(2).set_shard_window({4, 4, 10}, 2)); }),
                  "shard 1 ends at sample 4, not after the previous shard's end");
  EXPECT_CONTAINS(error_of([] { Sampler(10, SamplerOptions().set_batch_size(2).set_shard_window({10}, -1)); }),
                  "shard_window must be 0");
}

TEST(Sampler, RejectsBadOptions) {
  using stoker::testing::error_of;
  EXPECT_CONTAINS(error_of([] { Sampler(10, SamplerOptions().set_rank(2).set_world_size(2)); }),
                  "shard rank 2 of 2 is out of range");
  EXPECT_CONTAINS(error_of([] { Sampler(10, SamplerOptions().set_batch_size(0)); }), "batch_size must be positive");
  EXPECT_CONTAINS(error_of([] { Sampler(10, SamplerOptions().set_batch_size(16)); }),
                  "10 samples are fewer than one batch of 16 with drop_last");
  EXPECT_CONTAINS(error_of([] { Sampler(0, SamplerOptions()); }), "the data set is empty");
  EXPECT_CONTAINS(error_of([] { Sampler(10, SamplerOptions().set_batch_size(2).set_step_batches(0)); }),
                  "step_batches must be at least 1");
}

}  // namespace
}  // namespace stoker::data
