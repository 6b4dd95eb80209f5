// What the training loop consumes: batches on the device, an epoch at a time. The Loader (the data
// pipeline, data/loader.h) is one BatchSource; the doctor's cached rungs and tests' in-memory batches
// are others, so the Trainer runs the same step whatever feeds it.
//
// A source's position is (epoch, batch): start_epoch(epoch, first_batch) both starts an epoch and
// restores a saved position (resuming mid-epoch), and a source built from the same options hands out
// the same batches from there. The Trainer keeps the position in its checkpoints (TrainState).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <torch/types.h>

namespace stoker::data {

// The target of a sample left out of a batch because it could not be read (an evaluation loader's
// bad samples: see LoaderOptions::exclude_bad_samples); its pixels are zero. Metrics skip it.
constexpr int64_t kExcludedTarget = -1;

struct Batch {
  torch::Tensor input;   // [B, C, H, W] (or uint8 [B, H, W, C] when a loader is asked for raw batches), on the device
  torch::Tensor target;  // int64 [B], on the device; kExcludedTarget for an excluded sample
  int64_t index = 0;     // batch index within the epoch
  // Which samples the batch holds and the seeds of their random draws, as one number: the XOR of
  // sample_digest over its samples, so that the digests of a global batch's slices on several ranks
  // XOR to the digest of the same samples in one process. 0 from a source that does not know them.
  uint64_t digest = 0;
  const void* host_buffer = nullptr;  // the pooled host buffer it was built in (diagnostics)
  // Seconds the caller's next() spent on batch operations after the batch had arrived (data.batch_ops,
  // AugmentedSource): issuing device work, not waiting for the loader, so the Trainer does not count
  // them as data wait (more workers would not shorten them).
  double ops_seconds = 0;
  int64_t size() const { return target.size(0); }
};

// Seconds spent per stage since the last take_times(). Worker stages are summed over threads (CPU
// time); wait and copy are the caller's wall time.
struct StageTimes {
  double read = 0, decode = 0, transform = 0;  // in workers (or inline)
  double wait = 0;                              // caller blocked in next() for a batch
  double copy = 0;                              // host -> device copy and conversion to float
  double batch_ops = 0;                         // caller in the batch operations (data.batch_ops)
  int64_t samples = 0, batches = 0, bad_samples = 0;
  // What the read stage handed out: bytes (encoded files, or pixels of decoded data sets) and the
  // files it opened (about one a sample for ImageFolder; a shard's file only once).
  int64_t read_bytes = 0, read_opens = 0;
};

// The shape of one input sample as a source hands it out: channels, height, width (height and width
// 0 when the samples vary in size).
struct InputShape {
  int64_t channels = 0, height = 0, width = 0;
  bool fixed() const { return channels > 0 && height > 0 && width > 0; }
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;

  // Batches in one epoch (this process's share of it).
  virtual int64_t num_batches() const = 0;
  // Samples in one epoch (this process's share), counting a dropped partial batch.
  virtual int64_t num_samples() const = 0;
  // The shape of the inputs it hands out: channels, height and width of one sample.
  virtual int64_t channels() const = 0;
  virtual int64_t out_height() const = 0;
  virtual int64_t out_width() const = 0;
  InputShape shape() const { return {channels(), out_height(), out_width()}; }

  // Starts `epoch` at batch `first_batch` (to resume mid-epoch); abandons any epoch in progress.
  virtual void start_epoch(int64_t epoch, int64_t first_batch = 0) = 0;
  // The next batch of the epoch on the device, or nothing at its end. Errors (a bad sample with
  // data.on_bad_sample: error, a worker's failure) are thrown from here.
  virtual std::optional<Batch> next() = 0;
  // Per-stage times since the last call; a source without such stages reports only what it has.
  virtual StageTimes take_times() { return {}; }
  // The name of each class by label, when the data has them (Dataset::class_names); empty otherwise.
  virtual std::vector<std::string> class_names() const { return {}; }
};

}  // namespace stoker::data
