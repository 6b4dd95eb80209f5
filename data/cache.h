// Samples and batches kept in memory: the caches of the doctor's ladder (doctor/doctor.h) and of
// `data.cache`. Each cache removes one stage of the pipeline from every later step:
//
//   CachedDataset, level raw      the bytes each sample's read gave (encoded files, or a data set's
//                                 own pixels): storage reads are gone, decoding is still paid
//   CachedDataset, level decoded  each sample decoded in full, untransformed: reads and decoding are
//                                 gone, transforms and collation are still paid
//   CachedBatchSource             whole batches, resident where they were put: on the device (only
//                                 the step is paid) or in host memory, copied and normalised on
//                                 every next() (the copy is still paid)
//
// A CachedDataset holds the first `samples` samples of the data set it wraps, fewer when its memory
// budget cannot hold them (it says which: subset_reason()). Filling it reads (and decodes) each
// sample once, on `fill_threads` threads, before the first read() it answers.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/types.h>

#include "data/batch_source.h"
#include "data/dataset.h"
#include "data/settings.h"

namespace stoker::data {

enum class CacheLevel { kRaw, kDecoded };
const char* cache_level_name(CacheLevel level);
// The level `data.cache` asks for (kRaw or kDecoded; kNone has none and is refused).
CacheLevel cache_level_of(DataCache cache);

struct CacheOptions {
  CacheLevel level = CacheLevel::kRaw;
  int64_t max_samples = 0;      // cache at most this many (the first ones); 0 = all
  int64_t max_bytes = 0;        // memory budget for the cached samples; 0 = none
  int64_t fill_threads = 1;     // threads that read (and decode) the samples into the cache
  int64_t max_image_pixels = kDefaultMaxImagePixels;  // decoded level: larger images are refused

  CacheOptions& set_level(CacheLevel v) { level = v; return *this; }
  CacheOptions& set_max_samples(int64_t v) { max_samples = v; return *this; }
  CacheOptions& set_max_bytes(int64_t v) { max_bytes = v; return *this; }
  CacheOptions& set_fill_threads(int64_t v) { fill_threads = v; return *this; }
};

class CachedDataset : public Dataset {
 public:
  // Reads (and, at the decoded level, decodes) the samples to cache. A sample that cannot be read
  // or decoded is an error naming it: a cache is built from data that the pipeline can load.
  CachedDataset(std::shared_ptr<Dataset> inner, CacheOptions options);

  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  int64_t num_classes() const override { return inner_->num_classes(); }
  int64_t channels() const override { return inner_->channels(); }
  int64_t height() const override { return inner_->height(); }
  int64_t width() const override { return inner_->width(); }
  void read(int64_t index, RawSample& out) const override;
  std::string describe(int64_t index) const override { return inner_->describe(index); }
  // The wrapped data set's shards when every sample is cached (the same order as without the cache).
  ShardLayout shard_layout() const override {
    return size() == inner_->size() ? inner_->shard_layout() : ShardLayout{};
  }

  CacheLevel level() const { return options_.level; }
  // Bytes the cached samples hold.
  int64_t bytes() const { return bytes_; }
  // What caching every sample of the wrapped data set would take (measured on the cached ones).
  double estimated_full_bytes() const;
  // Why fewer samples than asked for are cached ("" when all asked for are): the memory budget.
  const std::string& subset_reason() const { return subset_reason_; }
  double fill_seconds() const { return fill_seconds_; }

 private:
  void fill(int64_t count);
  void load(int64_t index, RawSample& out) const;

  std::shared_ptr<Dataset> inner_;
  CacheOptions options_;
  std::vector<RawSample> samples_;
  int64_t bytes_ = 0;
  std::string subset_reason_;
  double fill_seconds_ = 0;
};

// Hands out the same few batches over and over, `batches_per_epoch` per epoch (their indices
// counting up within the epoch), each passed through `prepare` first (nothing: as stored). With
// batches resident on the device and no `prepare` only the training step is left to pay; with
// uint8 batches in (pinned) host memory and a `prepare` that copies and normalises them, the copy
// is paid too and timed as the copy stage.
class CachedBatchSource : public BatchSource {
 public:
  using Prepare = std::function<torch::Tensor(const torch::Tensor& stored_input)>;
  CachedBatchSource(std::vector<Batch> batches, int64_t batches_per_epoch, int64_t channels,
                    int64_t height, int64_t width, Prepare prepare = nullptr);

  int64_t num_batches() const override { return batches_per_epoch_; }
  int64_t num_samples() const override;
  int64_t channels() const override { return channels_; }
  int64_t out_height() const override { return height_; }
  int64_t out_width() const override { return width_; }
  void start_epoch(int64_t epoch, int64_t first_batch = 0) override;
  std::optional<Batch> next() override;
  StageTimes take_times() override;

 private:
  std::vector<Batch> batches_;
  int64_t batches_per_epoch_, channels_, height_, width_;
  Prepare prepare_;
  int64_t position_ = 0;
  StageTimes times_;
};

// Takes `count` batches from `source` (starting new epochs as needed) and keeps deep copies: the
// source's buffers are reused, the copies are not.
std::vector<Batch> take_batches(BatchSource& source, int64_t count);

}  // namespace stoker::data
