#include "data/loader.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>

namespace stoker::data {
namespace {

ImageSet counting_set(int64_t n, int64_t size) {
  ImageSet set;
  set.images = torch::arange(n * size * size, torch::kInt64).remainder(251).to(torch::kUInt8).view({n, 1, size, size});
  set.labels = torch::arange(n, torch::kInt64).remainder(10);
  set.source = "counting";
  return set;
}

// Normalisation that hands out the raw pixel values (x - 0) / (255 * 1/255).
LoaderOptions plain(int64_t batch) {
  LoaderOptions o;
  o.batch_size = batch;
  o.mean = {0.0};
  o.std = {1.0 / 255.0};
  return o;
}

TEST(InMemoryLoader, BatchCountsFollowDropLast) {
  LoaderOptions o = plain(4);
  EXPECT_EQ(InMemoryLoader(counting_set(10, 3), o).num_batches(), 2);
  o.drop_last = false;
  InMemoryLoader loader(counting_set(10, 3), o);
  EXPECT_EQ(loader.num_batches(), 3);
  EXPECT_EQ(loader.batch(2).size(), 2);
}

TEST(InMemoryLoader, EveryEpochVisitsEverySampleOnceInANewOrder) {
  LoaderOptions o = plain(5);
  o.seed = 3;
  InMemoryLoader loader(counting_set(20, 2), o);
  std::vector<std::vector<int64_t>> orders;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    loader.set_epoch(epoch);
    std::vector<int64_t> order;
    for (int64_t b = 0; b < loader.num_batches(); ++b) {
      // The first pixel identifies the sample: sample i starts at (4 * i) % 251.
      torch::Tensor first = loader.batch(b).input.select(1, 0).select(1, 0).select(1, 0);
      for (int64_t k = 0; k < first.size(0); ++k) order.push_back(std::lround(first[k].item<float>()) / 4);
    }
    EXPECT_EQ(std::set<int64_t>(order.begin(), order.end()).size(), 20u);
    orders.push_back(order);
  }
  EXPECT_NE(orders[0], orders[1]);
  EXPECT_NE(orders[1], orders[2]);
}

TEST(InMemoryLoader, BatchesDependOnlyOnSeedEpochAndIndex) {
  LoaderOptions o = plain(8);
  o.seed = 11;
  o.random_crop_padding = 2;
  o.horizontal_flip = true;
  InMemoryLoader a(counting_set(40, 6), o), b(counting_set(40, 6), o);
  a.set_epoch(2);
  b.set_epoch(0);
  (void)b.batch(1);  // other work first must not matter
  b.set_epoch(2);
  for (int64_t i : {3, 0, 4}) {
    EXPECT_TRUE(torch::equal(a.batch(i).input, b.batch(i).input)) << "batch " << i;
    EXPECT_TRUE(torch::equal(a.batch(i).target, b.batch(i).target)) << "batch " << i;
  }
  o.seed = 12;
  InMemoryLoader c(counting_set(40, 6), o);
  c.set_epoch(2);
  EXPECT_FALSE(torch::equal(a.batch(0).input, c.batch(0).input));
}

TEST(InMemoryLoader, CropAndFlipMatchAReference) {
  LoaderOptions o = plain(6);
  o.shuffle = false;
  o.random_crop_padding = 1;
  o.horizontal_flip = true;
  ImageSet set = counting_set(6, 5);
  torch::Tensor source = set.images.to(torch::kFloat32);
  InMemoryLoader loader(set, o);
  torch::Tensor batch = loader.batch(0).input;
  int flipped = 0, shifted = 0;
  for (int64_t i = 0; i < 6; ++i) {
    // Reference: pad by 1 with zeros, then try every crop offset and flip; one must match exactly.
    torch::Tensor padded = torch::constant_pad_nd(source[i], {1, 1, 1, 1}, 0);
    bool found = false;
    for (int64_t dy = 0; dy <= 2 && !found; ++dy) {
      for (int64_t dx = 0; dx <= 2 && !found; ++dx) {
        for (bool flip : {false, true}) {
          torch::Tensor view = flip ? padded.flip({2}) : padded;
          torch::Tensor crop = view.slice(1, dy, dy + 5).slice(2, dx, dx + 5);
          if (torch::equal(crop, batch[i])) {
            found = true;
            flipped += flip;
            shifted += (dy != 1 || dx != 1);
            break;
          }
        }
      }
    }
    EXPECT_TRUE(found) << "sample " << i << " is no crop/flip of its source";
  }
  EXPECT_GT(flipped + shifted, 0) << "no augmentation happened at all";
}

TEST(InMemoryLoader, NormalisesOnTheDeviceSide) {
  LoaderOptions o = plain(2);
  o.shuffle = false;
  o.mean = {0.5};
  o.std = {0.25};
  ImageSet set;
  set.images = torch::tensor({0, 255, 51, 102}, torch::kUInt8).view({2, 1, 1, 2});
  set.labels = torch::tensor({1, 2}, torch::kInt64);
  set.source = "four pixels";
  InMemoryLoader loader(set, o);
  Batch batch = loader.batch(0);
  torch::Tensor expected = (set.images.to(torch::kFloat32) / 255.0 - 0.5) / 0.25;
  EXPECT_TRUE(torch::allclose(batch.input, expected, 1e-6, 1e-6));
  EXPECT_EQ(batch.input.scalar_type(), torch::kFloat32);
}

TEST(InMemoryLoader, RejectsMismatchedNormalisation) {
  LoaderOptions o = plain(2);
  o.mean = {0.5, 0.5, 0.5};
  o.std = {0.2, 0.2, 0.2};
  try {
    InMemoryLoader loader(counting_set(4, 2), o);
    FAIL();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("1 channel(s) but normalisation has 3 mean"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace stoker::data
