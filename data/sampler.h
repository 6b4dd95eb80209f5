// Which samples each batch of an epoch holds, on this process: the epoch's order (a shuffle that
// depends only on (seed, epoch)), this rank's shard of it, its cut into batches, and the position
// (epoch, next batch) that a checkpoint saves and a resumed run restores. The order is our own
// splitmix64 shuffle, so that it is the same on every platform and for every worker count.
//
// Training shards (even_shards) are cut so that batches do not depend on the number of processes:
// the epoch's order is read as a sequence of global batches of batch_size x world_size samples, and
// rank r's batch k is the r-th slice of global batch k. Trained by N ranks with batch b, or by one
// process with batch b accumulating N batches per step, or with batch N x b, every optimizer step
// sees the same samples (and, their draws being per-sample, the same augmentation).
//
//   Sampler sampler(dataset.size(), SamplerOptions().set_batch_size(64).set_rank(1).set_world_size(4));
//   sampler.start_epoch(3);                // or seek({3, 120}) to resume mid-epoch
//   while (auto batch = sampler.next()) ...  // batch->samples: the dataset indices of the batch
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace stoker::data {

struct SamplerOptions {
  int64_t batch_size = 128;
  bool shuffle = true;
  bool drop_last = true;  // leave out a last, partial batch
  uint64_t seed = 0;
  // This process's share of each epoch: for training (even_shards), the rank-th slice of every
  // global batch; for evaluation, samples rank, rank + world_size, ... of the epoch's order.
  int64_t rank = 0;
  int64_t world_size = 1;
  // Give every rank the same number of samples (and so of batches), as distributed training needs:
  // with drop_last the epoch's last (size % world_size) samples are left out; without it the ranks
  // that come short repeat the epoch's first samples (torch's DistributedSampler). Off: the shards
  // cover the epoch exactly once and differ in size by at most one sample (for evaluation).
  bool even_shards = false;
  // Batches per optimizer step (gradient accumulation). With drop_last the epoch ends after the last
  // whole step, so that a step never mixes a partial group of batches whatever the world size.
  int64_t step_batches = 1;
  // Repeated augmentation (DeiT; timm's RepeatAugSampler): the shuffled order repeats every sample
  // `repeats` times in a row, each repeat with its own augmentation draws (SampledBatch::repeat), and
  // the epoch keeps the data set's length by taking the first dataset_size entries of that order, so
  // an epoch sees about dataset_size / repeats distinct samples. Sharding then cuts this order as it
  // cuts any other (global-batch slices for training), so it does not depend on the world size.
  int64_t repeats = 1;
  // Shard-locality order, for shards on storage that dislikes random reads (WebDataset tars on a
  // network file system or a disk): with shard_window = N > 0 and shuffle on, the epoch's order
  // shuffles the shards (the runs of consecutive sample indices that end at shard_ends), takes them
  // N at a time in that order, and shuffles the samples within each group of N shards. A stretch of
  // the order within one group reads from at most N shards; one no longer than a group from at most 2 N.
  // It is a pure function of (seed, epoch, shard_ends, N), sharded and cut into global batches as
  // any order, so batches stay independent of the world size and the worker count. 0: one global
  // shuffle. shard_ends: ascending, the last equal to the data set's size.
  std::vector<int64_t> shard_ends;
  int64_t shard_window = 0;

  SamplerOptions& set_batch_size(int64_t v) { batch_size = v; return *this; }
  SamplerOptions& set_shuffle(bool v) { shuffle = v; return *this; }
  SamplerOptions& set_drop_last(bool v) { drop_last = v; return *this; }
  SamplerOptions& set_seed(uint64_t v) { seed = v; return *this; }
  SamplerOptions& set_rank(int64_t v) { rank = v; return *this; }
  SamplerOptions& set_world_size(int64_t v) { world_size = v; return *this; }
  SamplerOptions& set_even_shards(bool v) { even_shards = v; return *this; }
  SamplerOptions& set_step_batches(int64_t v) { step_batches = v; return *this; }
  SamplerOptions& set_repeats(int64_t v) { repeats = v; return *this; }
  SamplerOptions& set_shard_window(std::vector<int64_t> ends, int64_t window) {
    shard_ends = std::move(ends);
    shard_window = window;
    return *this;
  }
};

// Where a sampler stands: the epoch and the next batch it hands out.
struct SamplerPosition {
  int64_t epoch = 0;
  int64_t batch = 0;
  bool operator==(const SamplerPosition& o) const { return epoch == o.epoch && batch == o.batch; }
};

// One epoch's samples on this rank, in order; immutable, so workers share it.
struct EpochSamples {
  int64_t epoch = 0;
  std::vector<int64_t> samples;
  // With repeated augmentation, which repeat of its sample each entry is (0 .. repeats - 1); empty
  // without it (every entry is repeat 0).
  std::vector<int32_t> repeats;
};

// The samples of one batch.
struct SampledBatch {
  int64_t epoch = 0;
  int64_t index = 0;  // within the epoch
  std::shared_ptr<const EpochSamples> order;
  int64_t begin = 0, count = 0;  // order->samples[begin, begin + count)
  int64_t sample(int64_t slot) const { return order->samples[static_cast<size_t>(begin + slot)]; }
  // Which repeat of its sample slot `slot` is (repeated augmentation; 0 without it).
  int64_t repeat(int64_t slot) const {
    return order->repeats.empty() ? 0 : order->repeats[static_cast<size_t>(begin + slot)];
  }
};

class Sampler {
 public:
  // Checks the options (names the bad one); `dataset_size` samples per epoch before sharding.
  Sampler(int64_t dataset_size, SamplerOptions options);

  const SamplerOptions& options() const { return options_; }
  int64_t dataset_size() const { return dataset_size_; }
  // This rank's samples per epoch (counting a dropped partial batch) and its batches.
  int64_t num_samples() const { return shard_size_; }
  int64_t num_batches() const;

  // The whole order of `epoch` on this rank (a pure function of the options and the epoch).
  std::shared_ptr<const EpochSamples> epoch_samples(int64_t epoch) const;
  // Batch `index` of `order` (the last one may be partial).
  SampledBatch batch(const std::shared_ptr<const EpochSamples>& order, int64_t index) const;

  // Starts `epoch` at batch `first_batch`; the same as seek({epoch, first_batch}).
  void start_epoch(int64_t epoch, int64_t first_batch = 0);
  void seek(const SamplerPosition& position);
  SamplerPosition position() const { return position_; }
  // The current epoch's order (empty before the first start_epoch / seek).
  const std::shared_ptr<const EpochSamples>& order() const { return order_; }
  // The batches of the epoch in progress (0 before the first start_epoch / seek).
  int64_t end_batch() const { return end_batch_; }
  bool done() const { return position_.batch >= end_batch_; }
  // The batch at the position, advancing it; nothing at the end of the epoch.
  std::optional<SampledBatch> next();

 private:
  SamplerOptions options_;
  int64_t dataset_size_ = 0, shard_size_ = 0;
  SamplerPosition position_;
  int64_t end_batch_ = 0;  // 0 until an epoch is started
  std::shared_ptr<const EpochSamples> order_;
};

}  // namespace stoker::data
