#include "data/loader.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <set>

#include "common/error.h"
#include "data/transform_options.h"
#include "test_util.h"

namespace stoker::data {
namespace {

// n images of size x size x channels whose first pixel encodes the sample index (i % 251).
std::shared_ptr<TensorImageDataset> counting(int64_t n, int64_t size, int64_t channels = 1) {
  std::vector<uint8_t> pixels(n * size * size * channels);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t p = 0; p < size * size * channels; ++p) {
      pixels[(i * size * size * channels) + p] = static_cast<uint8_t>((i + p * 3) % 251);
    }
  }
  std::vector<int64_t> labels(n);
  for (int64_t i = 0; i < n; ++i) labels[i] = i % 10;
  return std::make_shared<TensorImageDataset>(std::move(pixels), std::move(labels), size, size, channels,
                                              10, "counting");
}

TypedOptions random_crop(int64_t size, int64_t padding) {
  TypedOptions t = make_transform("random_crop");
  t.as<RandomCropOptions>().size = size;
  t.as<RandomCropOptions>().padding = padding;
  return t;
}

// Normalisation that hands out the raw pixel values: (x - 0) / (255 * 1/255).
LoaderOptions plain(int64_t batch, int64_t channels = 1) {
  LoaderOptions o;
  o.batch_size = batch;
  o.mean = std::vector<double>(channels, 0.0);
  o.std = std::vector<double>(channels, 1.0 / 255.0);
  return o;
}

using testing::epoch_of;

// The sample indices of a batch, read back from the first pixel (requires no augmentation).
std::vector<int64_t> ids(const Batch& b) {
  std::vector<int64_t> out;
  for (int64_t k = 0; k < b.size(); ++k) out.push_back(std::lround(b.input[k][0][0][0].item<float>()));
  return out;
}

TEST(Loader, BatchCountsFollowDropLast) {
  LoaderOptions o = plain(4);
  EXPECT_EQ(Loader(counting(10, 3), o).num_batches(), 2);
  o.drop_last = false;
  Loader loader(counting(10, 3), o);
  EXPECT_EQ(loader.num_batches(), 3);
  const auto batches = epoch_of(loader, 0);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[2].size(), 2);
  EXPECT_EQ(batches[2].index, 2);
}

TEST(Loader, EveryEpochVisitsEverySampleOnceInANewOrder) {
  LoaderOptions o = plain(5);
  o.seed = 3;
  o.workers = 2;
  Loader loader(counting(20, 2), o);
  std::vector<std::vector<int64_t>> orders;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> order;
    for (const auto& b : epoch_of(loader, epoch)) {
      for (int64_t id : ids(b)) order.push_back(id);
    }
    EXPECT_EQ(std::set<int64_t>(order.begin(), order.end()).size(), 20u);
    orders.push_back(order);
  }
  EXPECT_NE(orders[0], orders[1]);
  EXPECT_NE(orders[1], orders[2]);
}

TEST(Loader, SameBatchesForZeroOneAndFourWorkers) {
  std::vector<std::vector<Batch>> runs;
  for (int64_t workers : {0, 1, 4}) {
    LoaderOptions o = plain(8, 3);
    o.seed = 11;
    o.workers = workers;
    o.transforms = {random_crop(6, 2), make_transform("horizontal_flip")};
    Loader loader(counting(70, 6, 3), o);
    (void)epoch_of(loader, 0);
    runs.push_back(epoch_of(loader, 1));
  }
  for (size_t r = 1; r < runs.size(); ++r) {
    ASSERT_EQ(runs[r].size(), runs[0].size());
    for (size_t b = 0; b < runs[0].size(); ++b) {
      EXPECT_TRUE(torch::equal(runs[r][b].input, runs[0][b].input)) << "run " << r << " batch " << b;
      EXPECT_TRUE(torch::equal(runs[r][b].target, runs[0][b].target)) << "run " << r << " batch " << b;
    }
  }
}

TEST(Loader, StartingMidEpochGivesTheSameLaterBatches) {
  LoaderOptions o = plain(4);
  o.seed = 5;
  o.workers = 2;
  o.transforms = {random_crop(5, 1)};
  Loader loader(counting(40, 5), o);
  const auto full = epoch_of(loader, 3);
  const auto rest = epoch_of(loader, 3, 6);
  ASSERT_EQ(rest.size(), full.size() - 6);
  for (size_t i = 0; i < rest.size(); ++i) {
    EXPECT_EQ(rest[i].index, full[i + 6].index);
    EXPECT_TRUE(torch::equal(rest[i].input, full[i + 6].input));
  }
}

TEST(Loader, AbandoningAnEpochMidwayIsSafe) {
  LoaderOptions o = plain(2);
  o.workers = 3;
  o.prefetch_factor = 3;
  Loader loader(counting(200, 4), o);
  for (int round = 0; round < 20; ++round) {
    loader.start_epoch(round);
    for (int k = 0; k < round % 5; ++k) ASSERT_TRUE(loader.next().has_value());
  }
  EXPECT_EQ(epoch_of(loader, 99).size(), 100u);
}

TEST(Loader, ShardsCoverAnEpochExactlyOnce) {
  std::multiset<int64_t> seen;
  for (int64_t rank = 0; rank < 3; ++rank) {
    LoaderOptions o = plain(4);
    o.seed = 9;
    o.drop_last = false;
    o.shard_rank = rank;
    o.shard_count = 3;
    o.workers = 1;
    Loader loader(counting(50, 2), o);
    for (const auto& b : epoch_of(loader, 2)) {
      for (int64_t id : ids(b)) seen.insert(id);
    }
  }
  EXPECT_EQ(seen.size(), 50u);
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 50u);
}

// Distributed training needs every rank to take the same number of steps.
TEST(Loader, EvenShardsGiveEveryRankTheSameNumberOfBatches) {
  for (bool drop_last : {true, false}) {
    std::set<int64_t> counts;
    for (int64_t rank = 0; rank < 3; ++rank) {
      LoaderOptions o = plain(4);
      o.drop_last = drop_last;
      o.shard_rank = rank;
      o.shard_count = 3;
      o.even_shards = true;
      Loader loader(counting(50, 2), o);
      const auto batches = epoch_of(loader, 1);
      EXPECT_EQ(static_cast<int64_t>(batches.size()), loader.num_batches());
      counts.insert(loader.num_batches());
    }
    EXPECT_EQ(counts.size(), 1u) << "drop_last " << drop_last;
  }
}

// Batch::digest names the samples and their draws: the same for any worker count; the slices of a
// global batch on two ranks XOR to one process's batch of the same samples; another epoch differs.
TEST(Loader, BatchDigestsXorOverRanksToOneProcesssAndDoNotDependOnWorkers) {
  auto digests = [](int64_t batch, int64_t rank, int64_t ranks, int64_t workers, int64_t epoch) {
    LoaderOptions o = plain(batch, 3);
    o.seed = 11;
    o.workers = workers;
    o.shard_rank = rank;
    o.shard_count = ranks;
    o.even_shards = true;
    o.transforms = {random_crop(6, 2), make_transform("horizontal_flip")};
    Loader loader(counting(70, 6, 3), o);
    std::vector<uint64_t> out;
    for (const Batch& b : epoch_of(loader, epoch)) out.push_back(b.digest);
    return out;
  };
  const std::vector<uint64_t> alone = digests(16, 0, 1, 0, 1);
  ASSERT_EQ(alone.size(), 4u);
  EXPECT_EQ(digests(16, 0, 1, 3, 1), alone);
  const std::vector<uint64_t> rank0 = digests(8, 0, 2, 2, 1), rank1 = digests(8, 1, 2, 0, 1);
  ASSERT_EQ(rank0.size(), 4u);
  ASSERT_EQ(rank1.size(), 4u);
  for (size_t k = 0; k < alone.size(); ++k) {
    EXPECT_NE(rank0[k], 0u);
    EXPECT_EQ(rank0[k] ^ rank1[k], alone[k]) << "batch " << k;
  }
  EXPECT_NE(digests(16, 0, 1, 0, 2), alone);
}

// The Loader takes a data set built elsewhere, so that it can be wrapped (here: reads counted).
TEST(Loader, TakesAWrappedDataSet) {
  class Counting : public Dataset {
   public:
    explicit Counting(std::shared_ptr<Dataset> inner) : inner_(std::move(inner)) {}
    int64_t size() const override { return inner_->size(); }
    int64_t num_classes() const override { return inner_->num_classes(); }
    int64_t channels() const override { return inner_->channels(); }
    int64_t height() const override { return inner_->height(); }
    int64_t width() const override { return inner_->width(); }
    void read(int64_t index, RawSample& out) const override {
      ++reads;
      inner_->read(index, out);
    }
    std::string describe(int64_t index) const override { return inner_->describe(index); }
    mutable std::atomic<int64_t> reads{0};

   private:
    std::shared_ptr<Dataset> inner_;
  };
  LoaderOptions o = plain(4, 3);
  o.seed = 4;
  o.workers = 2;
  o.transforms = {random_crop(5, 1), make_transform("horizontal_flip")};
  auto wrapped = std::make_shared<Counting>(counting(24, 5, 3));
  Loader direct(counting(24, 5, 3), o), through(wrapped, o);
  const auto a = epoch_of(direct, 2), b = epoch_of(through, 2);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i].input, b[i].input)) << "batch " << i;
  EXPECT_EQ(wrapped->reads.load(), 24);
}

TEST(Loader, NormalisesAfterTheCopy) {
  LoaderOptions o = plain(2);
  o.shuffle = false;
  o.mean = {0.5};
  o.std = {0.25};
  auto set = std::make_shared<TensorImageDataset>(std::vector<uint8_t>{0, 255, 51, 102},
                                                  std::vector<int64_t>{1, 2}, 1, 2, 1, 10, "four pixels");
  Loader loader(set, o);
  loader.start_epoch(0);
  const Batch batch = *loader.next();
  const torch::Tensor raw = torch::tensor({0, 255, 51, 102}, torch::kFloat32).view({2, 1, 1, 2});
  EXPECT_TRUE(torch::allclose(batch.input, (raw / 255.0 - 0.5) / 0.25, 1e-6, 1e-6));
  EXPECT_EQ(batch.input.scalar_type(), torch::kFloat32);
  EXPECT_TRUE(torch::equal(batch.target, torch::tensor({1, 2}, torch::kInt64)));
}

TEST(Loader, ChannelsLastIsOnlyALayout) {
  LoaderOptions o = plain(4, 3);
  o.shuffle = false;
  Loader nchw(counting(8, 5, 3), o);
  o.channels_last = true;
  Loader nhwc(counting(8, 5, 3), o);
  const Batch a = epoch_of(nchw, 0)[1], b = epoch_of(nhwc, 0)[1];
  EXPECT_TRUE(a.input.is_contiguous());
  EXPECT_TRUE(b.input.is_contiguous(torch::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(torch::equal(a.input, b.input));
}

// A data set whose sample `bad` cannot be read.
class FlakyDataset : public Dataset {
 public:
  FlakyDataset(std::shared_ptr<Dataset> inner, int64_t bad) : inner_(std::move(inner)), bad_(bad) {}
  int64_t size() const override { return inner_->size(); }
  int64_t num_classes() const override { return inner_->num_classes(); }
  int64_t channels() const override { return inner_->channels(); }
  int64_t height() const override { return inner_->height(); }
  int64_t width() const override { return inner_->width(); }
  void read(int64_t index, RawSample& out) const override {
    STOKER_CHECK(index != bad_, "{}: corrupt (test)", describe(index));
    inner_->read(index, out);
  }
  std::string describe(int64_t index) const override { return "file-" + std::to_string(index) + ".png"; }

 private:
  std::shared_ptr<Dataset> inner_;
  int64_t bad_;
};

TEST(Loader, WorkerErrorsReachTheCallerWithSampleAndFile) {
  for (int64_t workers : {0, 2}) {
    LoaderOptions o = plain(4);
    o.shuffle = false;
    o.workers = workers;
    o.skip_bad_samples = false;
    Loader loader(std::make_shared<FlakyDataset>(counting(40, 3), 13), o);
    loader.start_epoch(0);
    try {
      while (loader.next()) {
      }
      FAIL() << "no error";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("batch 3, sample 13 (file-13.png)"), std::string::npos) << msg;
      EXPECT_NE(msg.find("corrupt (test)"), std::string::npos) << msg;
    }
  }  // the destructor joins the workers
}

TEST(Loader, BadSamplesAreSkippedCountedAndReplaced) {
  LoaderOptions o = plain(4);
  o.shuffle = false;
  o.workers = 2;
  std::vector<std::string> warnings;
  std::mutex mutex;
  o.warn = [&](const std::string& m) {
    std::lock_guard<std::mutex> lock(mutex);
    warnings.push_back(m);
  };
  Loader loader(std::make_shared<FlakyDataset>(counting(40, 3), 13), o);
  const auto batches = epoch_of(loader, 0);
  ASSERT_EQ(batches.size(), 10u);
  for (const auto& b : batches) EXPECT_EQ(b.size(), 4);
  EXPECT_EQ(loader.take_times().bad_samples, 1);
  EXPECT_EQ(loader.bad_samples(), std::vector<std::string>{"file-13.png"});
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("file-13.png"), std::string::npos) << warnings[0];
}

// An evaluation loader leaves an unreadable sample out instead of replacing it: zero pixels, target
// kExcludedTarget, counted and named; the other samples are where they would be.
TEST(Loader, BadSamplesOfAnEvaluationLoaderAreExcludedAndCounted) {
  LoaderOptions o = plain(4);
  o.shuffle = false;
  o.workers = 2;
  o.exclude_bad_samples = true;
  o.warn = [](const std::string&) {};
  Loader loader(std::make_shared<FlakyDataset>(counting(40, 3), 13), o);
  const auto batches = epoch_of(loader, 0);
  o.exclude_bad_samples = false;
  Loader clean(counting(40, 3), o);
  const auto expected = epoch_of(clean, 0);
  ASSERT_EQ(batches.size(), 10u);
  for (size_t b = 0; b < batches.size(); ++b) {
    for (int64_t slot = 0; slot < 4; ++slot) {
      if (b == 3 && slot == 1) {
        EXPECT_EQ(batches[b].target[slot].item<int64_t>(), kExcludedTarget);
        EXPECT_EQ(batches[b].input[slot].abs().sum().item<double>(), 0.0);
      } else {
        EXPECT_EQ(batches[b].target[slot].item<int64_t>(), expected[b].target[slot].item<int64_t>());
        EXPECT_TRUE(torch::equal(batches[b].input[slot], expected[b].input[slot])) << b << " " << slot;
      }
    }
  }
  EXPECT_EQ(loader.take_times().bad_samples, 1);
  EXPECT_EQ(loader.bad_samples(), std::vector<std::string>{"file-13.png"});
}

TEST(Loader, TimesEachStage) {
  LoaderOptions o = plain(8);
  o.workers = 1;
  o.transforms = {random_crop(16, 2)};
  Loader loader(counting(64, 16), o);
  (void)epoch_of(loader, 0);
  const StageTimes t = loader.take_times();
  EXPECT_EQ(t.samples, 64);
  EXPECT_EQ(t.batches, 8);
  EXPECT_GT(t.read, 0.0);
  EXPECT_GT(t.transform, 0.0);
  EXPECT_GT(t.copy, 0.0);
  EXPECT_EQ(loader.take_times().samples, 0) << "take_times resets";
}

TEST(Loader, BatchBuffersComeFromAPoolAllocatedOnce) {
  LoaderOptions o = plain(4);
  o.workers = 2;
  o.prefetch_factor = 2;
  Loader loader(counting(64, 3), o);
  const auto pool = loader.host_buffers();
  EXPECT_EQ(pool.size(), 2u * 2u + 1u) << "workers * prefetch_factor + the one handed out";
  std::set<const void*> used;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    for (const auto& b : epoch_of(loader, epoch)) {
      ASSERT_NE(std::find(pool.begin(), pool.end(), b.host_buffer), pool.end()) << "not from the pool";
      used.insert(b.host_buffer);
    }
  }
  EXPECT_GT(used.size(), 1u);
  EXPECT_EQ(loader.host_buffers(), pool) << "the pool never grows";
}

TEST(Loader, RejectsMismatchedNormalisation) {
  LoaderOptions o = plain(2);
  o.mean = {0.5, 0.5, 0.5};
  o.std = {0.2, 0.2, 0.2};
  try {
    Loader loader(counting(4, 2), o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("1 channel(s) but normalisation has 3 mean"), std::string::npos) << e.what();
  }
}

TEST(Loader, InputDtypeOnlyRoundsTheFloat32Result) {
  std::vector<uint8_t> pixels(8 * 5 * 5 * 3);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>((i * 7) % 256);
  auto set = std::make_shared<TensorImageDataset>(pixels, std::vector<int64_t>(8, 1), 5, 5, 3, 10, "test");
  LoaderOptions lo;
  lo.batch_size = 4;
  lo.shuffle = false;
  lo.mean = {0.5, 0.4, 0.3};
  lo.std = {0.2, 0.25, 0.3};
  Loader f32(set, lo);
  lo.input_dtype = torch::kBFloat16;
  Loader bf16(set, lo);
  f32.start_epoch(0);
  bf16.start_epoch(0);
  const torch::Tensor a = f32.next()->input, b = bf16.next()->input;
  EXPECT_EQ(a.scalar_type(), torch::kFloat32);
  EXPECT_EQ(b.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(a.to(torch::kBFloat16), b));
  lo.input_dtype = torch::kInt64;
  EXPECT_CONTAINS(stoker::testing::error_of([&] { Loader bad(set, lo); }), "input dtype must be float32, bfloat16 or float16");
}

TEST(LoaderGpu, PinnedBuffersAndPrefetchMatchTheCpuPath) {
  STOKER_NEEDS_CUDA();
  LoaderOptions o = plain(8, 3);
  o.seed = 2;
  o.workers = 2;
  o.transforms = {random_crop(6, 1), make_transform("horizontal_flip")};
  Loader cpu(counting(64, 6, 3), o);
  o.device = torch::Device(torch::kCUDA, 0);
  o.device_prefetch = 3;
  Loader gpu(counting(64, 6, 3), o);
  EXPECT_TRUE(gpu.pinned());
  EXPECT_EQ(gpu.host_buffers().size(), 2u * 2u + 3u + 1u) << "worker window + device prefetch + one";
  const auto a = epoch_of(cpu, 1), b = epoch_of(gpu, 1);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(b[i].input.is_cuda());
    EXPECT_TRUE(torch::allclose(a[i].input, b[i].input.cpu(), 1e-6, 1e-6)) << "batch " << i;
    EXPECT_TRUE(torch::equal(a[i].target, b[i].target.cpu())) << "batch " << i;
  }
}

}  // namespace
}  // namespace stoker::data
