#include "data/prefetcher.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>

#include "common/error.h"
#include "test_util.h"

namespace stoker::data {
namespace {

TEST(HostBatchPool, HandsOutEachBufferOnceAndNeverGrows) {
  HostBatchPool pool(3, 4, 2, 5, 3, /*pinned=*/false);
  const auto buffers = pool.buffers();
  ASSERT_EQ(buffers.size(), 3u);
  std::set<HostBatch*> taken;
  while (HostBatch* b = pool.acquire()) {
    EXPECT_EQ(b->images.sizes(), (std::vector<int64_t>{4, 2, 5, 3}));
    EXPECT_EQ(b->labels.sizes(), (std::vector<int64_t>{4}));
    taken.insert(b);
  }
  EXPECT_EQ(taken.size(), 3u);
  EXPECT_FALSE(pool.has_free());
  pool.release(*taken.begin());
  EXPECT_EQ(pool.acquire(), *taken.begin());
  EXPECT_EQ(pool.buffers(), buffers);
}

// A filled host batch of 3 of its 4 slots: 2x2 gray images.
HostBatch& filled(HostBatchPool& pool) {
  HostBatch& b = *pool.acquire();
  b.images.copy_(torch::arange(16, torch::kInt64).to(torch::kUInt8).view({4, 2, 2, 1}));
  b.labels.copy_(torch::tensor({7, 8, 9, 0}, torch::kInt64));
  b.index = 5;
  b.count = 3;
  return b;
}

TEST(DevicePrefetcher, OnTheCpuHandsOutNormalisedCopies) {
  HostBatchPool pool(1, 4, 2, 2, 1, false);
  HostBatch& host = filled(pool);
  const Normalizer normalize(1, NormalizeOptions().set_mean({0.0}).set_std({1.0 / 255.0}));
  DevicePrefetcher prefetcher(PrefetcherOptions(), normalize, [](HostBatch*) { FAIL() << "no release on this path"; });
  EXPECT_FALSE(prefetcher.asynchronous());
  const Batch batch = prefetcher.convert(host);
  EXPECT_EQ(batch.index, 5);
  EXPECT_EQ(batch.size(), 3);
  EXPECT_EQ(batch.host_buffer, host.images.data_ptr());
  host.images.fill_(255);  // the buffer is reused for the next batch
  host.labels.fill_(1);
  EXPECT_TRUE(torch::allclose(batch.input, torch::arange(12, torch::kFloat32).view({3, 1, 2, 2}), 1e-5, 1e-5));
  EXPECT_TRUE(torch::equal(batch.target, torch::tensor({7, 8, 9}, torch::kInt64)));
  EXPECT_GT(prefetcher.take_copy_seconds(), 0.0);
  EXPECT_EQ(prefetcher.take_copy_seconds(), 0.0);
  EXPECT_CONTAINS(stoker::testing::error_of([&] { prefetcher.push(&host); }), "needs a CUDA device");
}

TEST(DevicePrefetcher, HandsOutTheUint8BatchWhenAsked) {
  HostBatchPool pool(1, 4, 2, 2, 1, false);
  HostBatch& host = filled(pool);
  PrefetcherOptions o;
  o.output_uint8 = true;
  DevicePrefetcher prefetcher(o, Normalizer(1, NormalizeOptions()), [](HostBatch*) {});
  const Batch batch = prefetcher.convert(host);
  host.images.fill_(0);
  EXPECT_EQ(batch.input.scalar_type(), torch::kUInt8);
  EXPECT_TRUE(torch::equal(batch.input, torch::arange(12, torch::kInt64).to(torch::kUInt8).view({3, 2, 2, 1})));
}

}  // namespace
}  // namespace stoker::data
