// data/retunable_loader.h: changing the loader's workers between batches leaves every batch as it was:
// the same samples, in the same order, with the same augmentation (issue 23's `continuous`).
#include "data/retunable_loader.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/core/CachingHostAllocator.h>

#include "data/resolution.h"
#include "data/transform_options.h"
#include "data/batch_util.h"
#include "test_util.h"

namespace stoker::data {
namespace {

// 70 3-channel 6x6 images, each pixel a function of its sample and position.
std::shared_ptr<TensorImageDataset> images() {
  const int64_t n = 70, bytes = 6 * 6 * 3;
  std::vector<uint8_t> pixels(n * bytes);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t p = 0; p < bytes; ++p) pixels[i * bytes + p] = static_cast<uint8_t>((i * 7 + p * 3) % 251);
  }
  std::vector<int64_t> labels(n);
  for (int64_t i = 0; i < n; ++i) labels[i] = i % 10;
  return std::make_shared<TensorImageDataset>(std::move(pixels), std::move(labels), 6, 6, 3, 10, "images");
}

// Random crops with padding and flips: each batch depends on the augmentation seeds of its samples.
LoaderOptions options(int64_t workers) {
  LoaderOptions o;
  o.batch_size = 8;
  o.seed = 11;
  o.workers = workers;
  o.mean = {0, 0, 0};
  o.std = {1, 1, 1};
  TypedOptions crop = make_transform("random_crop");
  crop.as<RandomCropOptions>().size = 5;
  crop.as<RandomCropOptions>().padding = 2;
  o.transforms = {crop, make_transform("horizontal_flip")};
  return o;
}

using testing::epoch_of;

using testing::expect_same_batches;

TEST(RetunableLoader, ChangingWorkersMidEpochKeepsEveryBatch) {
  Loader reference(images(), options(0));
  const std::vector<Batch> want0 = epoch_of(reference, 0), want1 = epoch_of(reference, 1);
  ASSERT_EQ(want0.size(), 8u);

  RetunableLoader loader(images(), options(0));
  loader.start_epoch(0);
  std::vector<Batch> got;
  // 0 workers, then 3 (prefetch 4: they build ahead, and what they built is dropped at the next
  // change), then 1, then back to 0, each after a few batches.
  const std::vector<std::pair<int64_t, int64_t>> changes = {{3, 4}, {1, 2}, {0, 2}};
  for (size_t c = 0; c <= changes.size(); ++c) {
    for (int k = 0; k < 2; ++k) {
      if (auto b = loader.next()) got.push_back(*b);
    }
    if (c < changes.size()) loader.set_workers(changes[c].first, changes[c].second);
  }
  while (auto b = loader.next()) got.push_back(*b);
  expect_same_batches(got, want0, "epoch 0 with three worker changes");
  EXPECT_EQ(loader.options().workers, 0);
  // A change between epochs, then the next epoch.
  loader.set_workers(2, 2);
  expect_same_batches(epoch_of(loader, 1), want1, "epoch 1 with 2 workers");
  // Every batch handed out is counted once, whichever loader built it.
  const StageTimes t = loader.take_times();
  EXPECT_EQ(t.batches, 16);
  EXPECT_EQ(t.samples, 16 * 8);
}

TEST(RetunableLoader, TheSameSettingsChangeNothingAndBadOnesAreErrors) {
  RetunableLoader loader(images(), options(2));
  loader.start_epoch(0);
  const auto first = loader.next();
  ASSERT_TRUE(first.has_value());
  loader.set_workers(2, 2);  // as it is
  EXPECT_EQ(loader.next()->index, 1);
  EXPECT_CONTAINS(stoker::testing::error_of([&] { loader.set_workers(-1, 2); }), "workers -1 must be >= 0");
}

// The loader a change replaces stops its workers and frees its buffers even while someone else (the
// run's setup) still holds it; using it again is an error that says why.
TEST(RetunableLoader, TheReplacedLoaderIsRetiredEvenWhileOthersHoldIt) {
  auto first = std::make_shared<Loader>(images(), options(2));
  RetunableLoader loader(images(), first);
  loader.start_epoch(0);
  ASSERT_TRUE(loader.next().has_value());
  EXPECT_FALSE(first->host_buffers().empty());
  loader.set_workers(1, 2);
  EXPECT_TRUE(first->host_buffers().empty());
  EXPECT_EQ(first->out_height(), 5);  // its shape is still known
  EXPECT_CONTAINS(stoker::testing::error_of([&] { first->next(); }), "this loader was retired");
  EXPECT_CONTAINS(stoker::testing::error_of([&] { first->start_epoch(0); }), "this loader was retired");
  EXPECT_EQ(loader.next()->index, 1);
}

// The pinned bytes the caching host allocator holds (in use or cached) after one epoch of a loader on
// the GPU that trained at each of `sizes` in turn (one epoch each), starting from an empty cache.
int64_t pinned_bytes_after(const std::vector<int64_t>& sizes) {
  at::HostAllocator* host = at::getHostAllocator(at::kCUDA);
  host->empty_cache();
  const int64_t before = host->get_stats().allocated_bytes.current;
  const int64_t n = 24, side = 64;
  auto set = std::make_shared<TensorImageDataset>(std::vector<uint8_t>(n * side * side * 3, 7),
                                                  std::vector<int64_t>(n, 1), side, side, 3, 10, "flat");
  LoaderOptions o = options(1);
  o.device = torch::Device(torch::kCUDA, 0);
  TypedOptions crop = make_transform("random_crop");
  crop.as<RandomCropOptions>().size = sizes.front();
  o.transforms = {crop};
  RetunableLoader loader(set, o);
  loader.set_resolution([sizes](int64_t epoch) { return sizes[static_cast<size_t>(epoch)]; }, o.transforms);
  for (size_t e = 0; e < sizes.size(); ++e) (void)epoch_of(loader, static_cast<int64_t>(e));
  return host->get_stats().allocated_bytes.current - before;
}

// Issue 33, G26: each loader replacement (here a new resolution each epoch, whose buffers fall in
// another of the allocator's power-of-two sizes) pins new buffers; the retired loader's go back to
// the system, so a run that changed size four times holds what one that never changed holds.
TEST(RetunableLoaderGpu, ARetiredLoadersPinnedBuffersAreReleased) {
  STOKER_NEEDS_CUDA();
  const int64_t alone = pinned_bytes_after({64});
  const int64_t schedule = pinned_bytes_after({16, 24, 32, 48, 64});
  EXPECT_GT(alone, 0);
  EXPECT_LE(schedule, alone + alone / 5) << "pinned after training at 64 only: " << alone
                                         << " bytes; after 16, 24, 32, 48 then 64: " << schedule;
}

}  // namespace
}  // namespace stoker::data
