// data/cache.h: the raw and decoded sample caches and the batch cache of the doctor's ladder.
#include "data/cache.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "data/dataset.h"
#include <fmt/format.h>
#include "data/decode.h"
#include "test_util.h"

namespace stoker::data {
namespace {

using stoker::testing::TempDir;

// An image folder of `n` PNGs of 6x5 pixels, two classes.
std::shared_ptr<Dataset> png_folder(const TempDir& dir, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    std::vector<uint8_t> pixels(6 * 5 * 3);
    for (size_t k = 0; k < pixels.size(); ++k) pixels[k] = static_cast<uint8_t>(k * 7 + i * 13);
    const auto folder = dir / ("train/" + std::string(i % 2 ? "b" : "a"));
    std::filesystem::create_directories(folder);
    stoker::testing::write_png(folder / fmt::format("{}.png", i), 6, 5, 3, pixels);
  }
  DatasetOptions o;
  o.type = "image_folder";
  o.root = dir.path().string();
  o.num_classes = 2;
  return create_dataset(o);
}

TEST(Cache, RawLevelKeepsTheEncodedBytesAndDecodedLevelThePixels) {
  TempDir dir;
  auto folder = png_folder(dir, 6);
  CachedDataset raw(folder, CacheOptions().set_level(CacheLevel::kRaw));
  CachedDataset decoded(folder, CacheOptions().set_level(CacheLevel::kDecoded).set_fill_threads(2));
  ASSERT_EQ(raw.size(), 6);
  ASSERT_EQ(decoded.size(), 6);
  for (int64_t i = 0; i < 6; ++i) {
    RawSample original, from_raw, from_decoded;
    folder->read(i, original);
    raw.read(i, from_raw);
    decoded.read(i, from_decoded);
    EXPECT_TRUE(from_raw.encoded);
    EXPECT_EQ(from_raw.bytes, original.bytes);
    EXPECT_EQ(from_raw.label, original.label);
    ASSERT_FALSE(from_decoded.encoded);
    Image expected;
    decode_image(original.bytes.data(), original.bytes.size(), DecodeOptions{}, expected, "x");
    EXPECT_EQ(from_decoded.image.pixels, expected.pixels);
    EXPECT_EQ(from_decoded.image.height, 6);
    EXPECT_EQ(from_decoded.image.width, 5);
    EXPECT_EQ(from_decoded.label, original.label);
    EXPECT_EQ(decoded.describe(i), folder->describe(i));
  }
  EXPECT_GT(decoded.bytes(), 6 * 6 * 5 * 3);
  EXPECT_TRUE(decoded.subset_reason().empty());
}

TEST(Cache, OverTheMemoryBudgetASubsetIsCachedAndSaysSo) {
  DatasetOptions o;
  o.type = "synthetic";
  o.own = dataset_type_options("synthetic");
  o.own.as<SyntheticOptions>().train_samples = 400;
  o.own.as<SyntheticOptions>().height = 16;
  o.own.as<SyntheticOptions>().width = 16;
  auto synthetic = create_dataset(o);
  // 16x16x3 = 768 pixel bytes a sample: 40 kB holds a few dozen samples, not 400.
  CachedDataset cache(synthetic, CacheOptions().set_level(CacheLevel::kDecoded).set_max_bytes(40000));
  EXPECT_LT(cache.size(), 400);
  EXPECT_GE(cache.size(), 16);
  EXPECT_LE(cache.bytes(), 40000 + 2000);
  EXPECT_CONTAINS(cache.subset_reason(), "over the memory budget");
  EXPECT_GT(cache.estimated_full_bytes(), 400.0 * 768);
  RawSample a, b;
  cache.read(3, a);
  synthetic->read(3, b);
  EXPECT_EQ(a.image.pixels, b.image.pixels);
  EXPECT_THROW(cache.read(cache.size(), a), Error);
}

TEST(Cache, AnUnreadableSampleIsAnErrorNamingIt) {
  TempDir dir;
  png_folder(dir, 2);
  stoker::testing::write_bytes(dir / "train/a/broken.png", "not a png at all");
  DatasetOptions o;
  o.type = "image_folder";
  o.root = dir.path().string();
  o.num_classes = 2;
  auto folder = create_dataset(o);
  const std::string message = stoker::testing::error_of(
      [&] { CachedDataset(folder, CacheOptions().set_level(CacheLevel::kDecoded)); });
  EXPECT_CONTAINS(message, "broken.png");
}

TEST(Cache, BatchSourceCyclesItsBatchesAndTimesThePreparation) {
  std::vector<Batch> batches(2);
  for (int i = 0; i < 2; ++i) {
    batches[i].input = torch::full({3, 1, 2, 2}, i, torch::kUInt8);
    batches[i].target = torch::full({3}, i, torch::kLong);
  }
  int prepared = 0;
  CachedBatchSource source(batches, 5, 1, 2, 2, [&](const torch::Tensor& x) {
    ++prepared;
    return x.to(torch::kFloat) + 1;
  });
  EXPECT_EQ(source.num_batches(), 5);
  EXPECT_EQ(source.num_samples(), 15);
  source.start_epoch(0, 1);
  std::vector<int64_t> indices;
  while (auto b = source.next()) {
    indices.push_back(b->index);
    EXPECT_EQ(b->input.scalar_type(), torch::kFloat);
    EXPECT_EQ(b->input.flatten()[0].item<float>(), static_cast<float>(b->index % 2 + 1));
  }
  EXPECT_EQ(indices, (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(prepared, 4);
  const StageTimes t = source.take_times();
  EXPECT_EQ(t.batches, 4);
  EXPECT_EQ(t.samples, 12);
  EXPECT_GT(t.copy, 0.0);
  EXPECT_EQ(source.take_times().batches, 0);
}

TEST(Cache, TakeBatchesCopiesAcrossEpochs) {
  std::vector<Batch> one(1);
  one[0].input = torch::arange(4, torch::kFloat).reshape({1, 1, 2, 2});
  one[0].target = torch::zeros({1}, torch::kLong);
  CachedBatchSource source(one, 2, 1, 2, 2);
  const std::vector<Batch> taken = take_batches(source, 5);
  ASSERT_EQ(taken.size(), 5u);
  EXPECT_NE(taken[0].input.data_ptr(), one[0].input.data_ptr());
  EXPECT_TRUE(torch::equal(taken[4].input, one[0].input));
}

}  // namespace
}  // namespace stoker::data
