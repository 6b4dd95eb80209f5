#include "data/cache.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <torch/torch.h>

#include "common/error.h"
#include "data/decode.h"

namespace stoker::data {
namespace {

int64_t sample_bytes(const RawSample& s) {
  return static_cast<int64_t>(sizeof(RawSample) + s.bytes.capacity() + s.image.pixels.capacity());
}

std::string format_bytes(double bytes) {
  if (bytes >= 1e9) return fmt::format("{:.1f} GB", bytes / 1e9);
  if (bytes >= 1e6) return fmt::format("{:.1f} MB", bytes / 1e6);
  return fmt::format("{:.0f} kB", bytes / 1e3);
}

}  // namespace

const char* cache_level_name(CacheLevel level) { return level == CacheLevel::kRaw ? "raw" : "decoded"; }

CacheLevel cache_level_of(DataCache cache) {
  STOKER_CHECK(cache != DataCache::kNone, "data.cache: none has no cache level");
  return cache == DataCache::kRaw ? CacheLevel::kRaw : CacheLevel::kDecoded;
}

CachedDataset::CachedDataset(std::shared_ptr<Dataset> inner, CacheOptions options)
    : inner_(std::move(inner)), options_(options) {
  STOKER_CHECK(inner_ != nullptr, "CachedDataset needs a data set to cache");
  STOKER_CHECK(options_.max_samples >= 0 && options_.max_bytes >= 0 && options_.fill_threads >= 1,
               "CachedDataset: max_samples and max_bytes must be >= 0 and fill_threads >= 1");
  const int64_t wanted = options_.max_samples > 0 ? std::min(options_.max_samples, inner_->size()) : inner_->size();
  STOKER_CHECK(wanted > 0, "CachedDataset: the data set to cache is empty");
  const auto start = std::chrono::steady_clock::now();
  // Measure a few samples first, so that the budget decides how many to cache before the rest is read.
  const int64_t probe = std::min<int64_t>(wanted, 16);
  fill(probe);
  int64_t count = wanted;
  if (options_.max_bytes > 0) {
    const double per_sample = static_cast<double>(bytes_) / static_cast<double>(probe);
    const auto fits = static_cast<int64_t>(static_cast<double>(options_.max_bytes) / per_sample);
    if (fits < wanted) {
      count = std::max<int64_t>(probe, fits);
      subset_reason_ = fmt::format("{} of {} samples would take {}, over the memory budget of {}", wanted,
                                   inner_->size(), format_bytes(per_sample * static_cast<double>(wanted)),
                                   format_bytes(static_cast<double>(options_.max_bytes)));
    }
  }
  fill(count);
  fill_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Reads (and decodes) samples [size(), count) into the cache, on fill_threads threads.
void CachedDataset::fill(int64_t count) {
  const int64_t first = size();
  if (count <= first) return;
  samples_.resize(count);
  std::atomic<int64_t> next{first};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&] {
    for (int64_t i = next++; i < count; i = next++) {
      try {
        load(i, samples_[i]);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        next = count;
      }
    }
  };
  const int64_t threads = std::min(options_.fill_threads, count - first);
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
  for (int64_t i = first; i < count; ++i) bytes_ += sample_bytes(samples_[i]);
}

void CachedDataset::load(int64_t index, RawSample& out) const {
  inner_->read(index, out);
  if (options_.level == CacheLevel::kRaw || !out.encoded) return;
  DecodeOptions decode;
  decode.channels = static_cast<int>(inner_->channels());
  decode.max_pixels = options_.max_image_pixels;
  decode_image(out.bytes.data(), out.bytes.size(), decode, out.image, inner_->describe(index));
  out.encoded = false;
  std::vector<uint8_t>().swap(out.bytes);
}

void CachedDataset::read(int64_t index, RawSample& out) const {
  STOKER_CHECK(index >= 0 && index < size(), "CachedDataset: sample {} is outside the {} cached", index, size());
  const RawSample& s = samples_[index];
  out.encoded = s.encoded;
  out.label = s.label;
  if (s.encoded) {
    out.bytes.assign(s.bytes.begin(), s.bytes.end());
    return;
  }
  out.image.height = s.image.height;
  out.image.width = s.image.width;
  out.image.channels = s.image.channels;
  out.image.pixels.assign(s.image.pixels.begin(), s.image.pixels.end());
}

double CachedDataset::estimated_full_bytes() const {
  if (samples_.empty()) return 0;
  return static_cast<double>(bytes_) / static_cast<double>(size()) * static_cast<double>(inner_->size());
}

// ---- CachedBatchSource ----------------------------------------------------------------------------------

CachedBatchSource::CachedBatchSource(std::vector<Batch> batches, int64_t batches_per_epoch, int64_t channels,
                                     int64_t height, int64_t width, Prepare prepare)
    : batches_(std::move(batches)),
      batches_per_epoch_(batches_per_epoch),
      channels_(channels),
      height_(height),
      width_(width),
      prepare_(std::move(prepare)) {
  STOKER_CHECK(!batches_.empty() && batches_per_epoch_ > 0,
               "CachedBatchSource needs at least one batch and a positive epoch length");
}

int64_t CachedBatchSource::num_samples() const {
  int64_t n = 0;
  for (int64_t i = 0; i < batches_per_epoch_; ++i) n += batches_[i % batches_.size()].size();
  return n;
}

void CachedBatchSource::start_epoch(int64_t /*epoch*/, int64_t first_batch) {
  position_ = std::clamp<int64_t>(first_batch, 0, batches_per_epoch_);
}

std::optional<Batch> CachedBatchSource::next() {
  if (position_ >= batches_per_epoch_) return std::nullopt;
  const Batch& stored = batches_[position_ % batches_.size()];
  Batch out = stored;
  out.index = position_++;
  if (prepare_) {
    const auto start = std::chrono::steady_clock::now();
    out.input = prepare_(stored.input);
    times_.copy += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  times_.samples += out.size();
  ++times_.batches;
  return out;
}

StageTimes CachedBatchSource::take_times() {
  StageTimes t = times_;
  times_ = StageTimes{};
  return t;
}

std::vector<Batch> take_batches(BatchSource& source, int64_t count) {
  std::vector<Batch> out;
  int64_t epoch = 0;
  bool any_this_epoch = false;
  source.start_epoch(epoch);
  while (static_cast<int64_t>(out.size()) < count) {
    std::optional<Batch> b = source.next();
    if (!b) {
      STOKER_CHECK(any_this_epoch, "the data source gave no batch in an epoch (fewer samples than one batch?)");
      source.start_epoch(++epoch);
      any_this_epoch = false;
      continue;
    }
    any_this_epoch = true;
    Batch copy = *b;
    copy.input = b->input.clone();
    copy.target = b->target.clone();
    copy.host_buffer = nullptr;
    out.push_back(std::move(copy));
  }
  return out;
}

}  // namespace stoker::data
