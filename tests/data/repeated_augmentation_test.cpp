// Repeated augmentation (data.repeated_augmentation, SamplerOptions::repeats): counts per sample,
// different draws per repeat, world-size independence, mid-epoch resume and worker independence.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <utility>

#include "common/error.h"
#include "data/loader.h"
#include "data/random.h"
#include "data/sampler.h"
#include "data/transform_options.h"
#include "test_util.h"

namespace stoker::data {
namespace {

using Entry = std::pair<int64_t, int64_t>;  // (sample, repeat)

std::vector<Entry> entries_of(Sampler& sampler, int64_t epoch, int64_t first = 0) {
  sampler.start_epoch(epoch, first);
  std::vector<Entry> out;
  while (auto b = sampler.next()) {
    for (int64_t s = 0; s < b->count; ++s) out.emplace_back(b->sample(s), b->repeat(s));
  }
  return out;
}

TEST(RepeatedAugmentation, EverySampleComesRepeatsTimesInARowAndTheEpochKeepsItsLength) {
  const int64_t n = 60, k = 3;
  Sampler plain(n, SamplerOptions().set_batch_size(6).set_seed(4));
  Sampler repeated(n, SamplerOptions().set_batch_size(6).set_seed(4).set_repeats(k));
  EXPECT_EQ(repeated.num_batches(), plain.num_batches());
  const auto order = plain.epoch_samples(2)->samples;
  const auto entries = entries_of(repeated, 2);
  ASSERT_EQ(entries.size(), static_cast<size_t>(n));
  std::map<int64_t, int64_t> counts;
  for (size_t j = 0; j < entries.size(); ++j) {
    EXPECT_EQ(entries[j].first, order[j / k]) << "entry " << j;  // the first n of the repeated order
    EXPECT_EQ(entries[j].second, static_cast<int64_t>(j % k)) << "entry " << j;
    ++counts[entries[j].first];
  }
  EXPECT_EQ(counts.size(), static_cast<size_t>(n / k));
  for (const auto& [sample, count] : counts) EXPECT_EQ(count, k) << "sample " << sample;
  // An epoch whose length is no multiple of k ends inside the repeats of its last sample.
  Sampler odd(10, SamplerOptions().set_batch_size(1).set_seed(4).set_repeats(3));
  std::map<int64_t, int64_t> odd_counts;
  for (const auto& e : entries_of(odd, 0)) ++odd_counts[e.first];
  std::vector<int64_t> sizes;
  for (const auto& [sample, count] : odd_counts) sizes.push_back(count);
  std::sort(sizes.begin(), sizes.end());
  EXPECT_EQ(sizes, (std::vector<int64_t>{1, 3, 3, 3}));
}

TEST(RepeatedAugmentation, StepsHoldTheSameEntriesWhateverTheWorldSize) {
  const int64_t n = 90, k = 4;
  Sampler alone(n, SamplerOptions().set_batch_size(12).set_seed(7).set_repeats(k).set_even_shards(true));
  const auto one = entries_of(alone, 1);
  std::vector<std::vector<Entry>> ranks;
  for (int64_t rank = 0; rank < 3; ++rank) {
    Sampler s(n, SamplerOptions().set_batch_size(4).set_seed(7).set_repeats(k).set_rank(rank).set_world_size(3)
                     .set_even_shards(true));
    ranks.push_back(entries_of(s, 1));
  }
  std::vector<Entry> merged;  // global batch b: rank 0's batch b, then rank 1's, then rank 2's
  for (size_t b = 0; b * 4 < ranks[0].size(); ++b) {
    for (const auto& r : ranks) merged.insert(merged.end(), r.begin() + b * 4, r.begin() + (b + 1) * 4);
  }
  EXPECT_EQ(merged, one);
}

TEST(RepeatedAugmentation, ResumingMidEpochGivesTheSameEntries) {
  Sampler a(50, SamplerOptions().set_batch_size(5).set_seed(3).set_repeats(2));
  const auto full = entries_of(a, 4);
  Sampler b(50, SamplerOptions().set_batch_size(5).set_seed(3).set_repeats(2));
  const auto rest = entries_of(b, 4, 3);
  EXPECT_EQ(rest, std::vector<Entry>(full.begin() + 15, full.end()));
}

TEST(RepeatedAugmentation, RejectsBadRepeats) {
  EXPECT_CONTAINS(stoker::testing::error_of([] { Sampler(10, SamplerOptions().set_batch_size(2).set_repeats(0)); }),
                  "repeated augmentation needs 1 to 10 repeats");
  EXPECT_CONTAINS(stoker::testing::error_of([] { Sampler(10, SamplerOptions().set_batch_size(2).set_repeats(11)); }),
                  "got 11");
}

// n images of size x size whose pixels are distinct, so that every crop offset shows.
std::shared_ptr<TensorImageDataset> ramp(int64_t n, int64_t size) {
  std::vector<uint8_t> pixels(n * size * size);
  for (int64_t i = 0; i < n * size * size; ++i) pixels[i] = static_cast<uint8_t>((i * 7) % 251);
  std::vector<int64_t> labels(n);
  for (int64_t i = 0; i < n; ++i) labels[i] = i % 10;
  return std::make_shared<TensorImageDataset>(std::move(pixels), std::move(labels), size, size, 1, 10, "ramp");
}

LoaderOptions augmenting(int64_t batch, int64_t repeats, int64_t workers) {
  LoaderOptions o;
  o.batch_size = batch;
  o.mean = {0.0};
  o.std = {1.0 / 255.0};
  o.seed = 13;
  o.workers = workers;
  o.repeats = repeats;
  TypedOptions crop = make_transform("random_crop");
  crop.as<RandomCropOptions>().size = 6;
  crop.as<RandomCropOptions>().padding = 3;
  o.transforms = {crop, make_transform("horizontal_flip")};
  return o;
}

using testing::epoch_of;

// Unshuffled with two repeats, batch b of two holds repeats 0 and 1 of sample b: their draws must
// differ (the same seed would make their digests cancel to 0 and their pixels equal), and repeat 0
// must draw exactly as a run without repeats.
TEST(RepeatedAugmentation, EachRepeatDrawsItsOwnAugmentation) {
  LoaderOptions o = augmenting(2, 2, 0);
  o.shuffle = false;
  Loader repeated(ramp(40, 6), o);
  LoaderOptions single = augmenting(1, 1, 0);
  single.shuffle = false;
  Loader plain(ramp(40, 6), single);
  const auto pairs = epoch_of(repeated, 1);
  const auto alone = epoch_of(plain, 1);
  ASSERT_EQ(pairs.size(), 20u);
  int64_t differing = 0;
  for (size_t b = 0; b < pairs.size(); ++b) {
    EXPECT_NE(pairs[b].digest, 0u) << "batch " << b;
    EXPECT_EQ(pairs[b].target[0].item<int64_t>(), pairs[b].target[1].item<int64_t>());
    EXPECT_TRUE(torch::equal(pairs[b].input[0], alone[b].input[0])) << "repeat 0 of sample " << b;
    differing += torch::equal(pairs[b].input[0], pairs[b].input[1]) ? 0 : 1;
  }
  // 49 crop offsets x 2 flips: two independent draws agree rarely.
  EXPECT_GE(differing, 17) << "repeats of a sample should draw different crops and flips";
}

TEST(RepeatedAugmentation, SameBatchesForZeroAndTwoWorkersAndAfterAMidEpochResume) {
  Loader inline_loader(ramp(64, 6), augmenting(8, 3, 0));
  Loader threaded(ramp(64, 6), augmenting(8, 3, 2));
  const auto a = epoch_of(inline_loader, 2);
  const auto b = epoch_of(threaded, 2);
  const auto resumed = epoch_of(threaded, 2, 5);
  ASSERT_EQ(a.size(), 8u);
  ASSERT_EQ(b.size(), a.size());
  ASSERT_EQ(resumed.size(), a.size() - 5);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(b[i].digest, a[i].digest) << "batch " << i;
    EXPECT_TRUE(torch::equal(b[i].input, a[i].input)) << "batch " << i;
    EXPECT_TRUE(torch::equal(b[i].target, a[i].target)) << "batch " << i;
    if (i >= 5) EXPECT_TRUE(torch::equal(resumed[i - 5].input, a[i].input)) << "resumed batch " << i;
  }
}

}  // namespace
}  // namespace stoker::data
