// The epoch order, its shards and the sampler's position (see sampler.h).
#include "data/sampler.h"

#include <algorithm>
#include <string>
#include <utility>

#include "common/error.h"
#include "data/random.h"

namespace stoker::data {
namespace {

// Fisher-Yates over v[0, n) driven by mix_seed from `state`.
void shuffle_span(int64_t* v, int64_t n, uint64_t state) {
  for (int64_t i = n - 1; i > 0; --i) {
    state = mix_seed(state, static_cast<uint64_t>(i));
    std::swap(v[i], v[static_cast<int64_t>(state % static_cast<uint64_t>(i + 1))]);
  }
}

// A permutation of 0..n-1 that depends only on (seed, epoch).
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle) {
  std::vector<int64_t> all(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) all[i] = i;
  if (shuffle) shuffle_span(all.data(), n, mix_seed(seed, 0x5348554646ull /* "SHUFF" */, static_cast<uint64_t>(epoch)));
  return all;
}

// The shard-locality order (SamplerOptions::shard_window): the shards shuffled, then the samples of
// each run of `window` consecutive shards of that order shuffled among themselves.
std::vector<int64_t> shard_window_order(const std::vector<int64_t>& ends, int64_t window, uint64_t seed,
                                        int64_t epoch) {
  const auto shards = static_cast<int64_t>(ends.size());
  std::vector<int64_t> shard_order(ends.size());
  for (int64_t k = 0; k < shards; ++k) shard_order[k] = k;
  shuffle_span(shard_order.data(), shards, mix_seed(seed, 0x5348415244ull /* "SHARD" */, static_cast<uint64_t>(epoch)));
  std::vector<int64_t> all;
  all.reserve(static_cast<size_t>(ends.back()));
  for (int64_t group = 0; group * window < shards; ++group) {
    const size_t begin = all.size();
    for (int64_t k = group * window; k < std::min(shards, (group + 1) * window); ++k) {
      const int64_t s = shard_order[k];
      for (int64_t i = s == 0 ? 0 : ends[s - 1]; i < ends[s]; ++i) all.push_back(i);
    }
    const uint64_t state = mix_seed(seed, 0x57494e444f57ull /* "WINDOW" */, static_cast<uint64_t>(epoch));
    shuffle_span(all.data() + begin, static_cast<int64_t>(all.size() - begin), mix_seed(state, static_cast<uint64_t>(group)));
  }
  return all;
}

// The first n entries of the order with every sample repeated `repeats` times in a row: the
// samples, and which repeat each entry is.
void repeat_order(std::vector<int64_t>& all, std::vector<int32_t>& repeat, int64_t repeats) {
  const auto n = static_cast<int64_t>(all.size());
  std::vector<int64_t> out(all.size());
  repeat.resize(all.size());
  for (int64_t j = 0; j < n; ++j) {
    out[j] = all[j / repeats];
    repeat[j] = static_cast<int32_t>(j % repeats);
  }
  all = std::move(out);
}

}  // namespace

Sampler::Sampler(int64_t dataset_size, SamplerOptions options)
    : options_(options), dataset_size_(dataset_size) {
  const SamplerOptions& o = options_;
  STOKER_CHECK(dataset_size > 0, "the data set is empty");
  STOKER_CHECK(o.batch_size > 0, "batch_size must be positive, got {}", o.batch_size);
  STOKER_CHECK(o.repeats >= 1 && o.repeats <= dataset_size,
               "repeated augmentation needs 1 to {} repeats (the data set's size), got {}", dataset_size,
               o.repeats);
  STOKER_CHECK(o.shard_window >= 0, "shard_window must be 0 (a global shuffle) or a number of shards, got {}",
               o.shard_window);
  if (o.shard_window > 0) {
    STOKER_CHECK(!o.shard_ends.empty() && o.shard_ends.back() == dataset_size,
                 "the shard-locality order needs the data set's shards: their ends ({}) must end at its {} samples",
                 o.shard_ends.empty() ? std::string("none") : std::to_string(o.shard_ends.back()), dataset_size);
    for (size_t k = 0; k < o.shard_ends.size(); ++k) {
      STOKER_CHECK(o.shard_ends[k] > (k == 0 ? 0 : o.shard_ends[k - 1]), "shard {} ends at sample {}, not after the "
                   "previous shard's end: shard ends must ascend", k, o.shard_ends[k]);
    }
  }
  STOKER_CHECK(o.step_batches >= 1, "step_batches must be at least 1, got {}", o.step_batches);
  STOKER_CHECK(o.world_size >= 1 && o.rank >= 0 && o.rank < o.world_size,
               "shard rank {} of {} is out of range; the rank must be in [0, world size)", o.rank,
               o.world_size);
  const int64_t n = dataset_size, w = o.world_size;
  if (!o.even_shards) {
    shard_size_ = (n - o.rank + w - 1) / w;
  } else {
    shard_size_ = o.drop_last ? n / w : (n + w - 1) / w;
  }
  STOKER_CHECK(!o.drop_last || shard_size_ >= o.batch_size,
               "{} samples are fewer than one batch of {} with drop_last; lower the batch size",
               shard_size_, o.batch_size);
  order_ = std::make_shared<const EpochSamples>();
}

int64_t Sampler::num_batches() const {
  const int64_t n = shard_size_, b = options_.batch_size, steps = options_.step_batches;
  return options_.drop_last ? n / b / steps * steps : (n + b - 1) / b;
}

namespace {

// Entry i of rank r's training shard: the r-th slice of each global batch of b x w samples; the
// epoch's last, partial global batch (when it is kept) is split evenly, wrapping round to the epoch's
// first samples where even shards need more than the epoch has (as torch's DistributedSampler pads).
int64_t global_batch_entry(int64_t i, int64_t n, const SamplerOptions& o) {
  const int64_t b = o.batch_size, w = o.world_size, global = b * w;
  const int64_t whole = n / global;  // whole global batches in the epoch
  if (i < whole * b) return (i / b) * global + o.rank * b + i % b;
  const int64_t rest = n - whole * global;
  const int64_t slice = o.drop_last ? rest / w : (rest + w - 1) / w;
  return (whole * global + o.rank * slice + (i - whole * b)) % n;
}

}  // namespace

std::shared_ptr<const EpochSamples> Sampler::epoch_samples(int64_t epoch) const {
  const SamplerOptions& o = options_;
  std::vector<int64_t> all = o.shuffle && o.shard_window > 0
                                 ? shard_window_order(o.shard_ends, o.shard_window, o.seed, epoch)
                                 : epoch_order(dataset_size_, o.seed, epoch, o.shuffle);
  std::vector<int32_t> repeat;
  if (o.repeats > 1) repeat_order(all, repeat, o.repeats);
  auto out = std::make_shared<EpochSamples>();
  out->epoch = epoch;
  if (o.world_size == 1) {
    out->samples = std::move(all);
    out->samples.resize(static_cast<size_t>(shard_size_));  // even shards with drop_last: the same size
    out->repeats = std::move(repeat);
    if (!out->repeats.empty()) out->repeats.resize(static_cast<size_t>(shard_size_));
    return out;
  }
  out->samples.reserve(static_cast<size_t>(shard_size_));
  // Evaluation shards: entry i for rank r is all[i * world_size + r] (they cover the epoch once).
  for (int64_t i = 0; i < shard_size_; ++i) {
    const int64_t at = o.even_shards ? global_batch_entry(i, dataset_size_, o) : i * o.world_size + o.rank;
    out->samples.push_back(all[static_cast<size_t>(at)]);
    if (!repeat.empty()) out->repeats.push_back(repeat[static_cast<size_t>(at)]);
  }
  return out;
}

SampledBatch Sampler::batch(const std::shared_ptr<const EpochSamples>& order, int64_t index) const {
  const auto size = static_cast<int64_t>(order->samples.size());
  SampledBatch b;
  b.epoch = order->epoch;
  b.index = index;
  b.order = order;
  b.begin = index * options_.batch_size;
  b.count = std::max<int64_t>(0, std::min(options_.batch_size, size - b.begin));
  return b;
}

void Sampler::start_epoch(int64_t epoch, int64_t first_batch) { seek({epoch, first_batch}); }

void Sampler::seek(const SamplerPosition& position) {
  STOKER_CHECK(position.batch >= 0 && position.batch <= num_batches(),
               "cannot start at batch {} of an epoch of {} batches", position.batch, num_batches());
  if (order_->samples.empty() || order_->epoch != position.epoch) order_ = epoch_samples(position.epoch);
  position_ = position;
  end_batch_ = num_batches();
}

std::optional<SampledBatch> Sampler::next() {
  if (done()) return std::nullopt;
  return batch(order_, position_.batch++);
}

}  // namespace stoker::data
