// The batch loader: the data pipeline from a Dataset to a normalised float batch on the device.
//
//   read (Dataset::read) -> decode (JPEG/PNG; only the planned region, scaled where it can)
//   -> transform (crop/resize/flip on uint8, written straight into the sample's slot of a batch buffer)
//   -> [device prefetcher: copy of the uint8 batch on a side CUDA stream, `device_prefetch` deep]
//   -> uint8 -> float, normalised, on the device (4x fewer bytes cross the bus than float would), in
//      one fused kernel (kernels/preprocess.h)
//
// `workers` threads build whole batches (0 = the calling thread does), with up to
// `prefetch_factor` batches in flight per worker, handed out in order. Batch buffers are allocated
// once, pinned when the device is CUDA, and reused from a pool. All randomness is a function of
// (seed, epoch, sample index), so batches are identical whatever the worker count. Each stage is
// timed. A worker's exception reaches the caller of next() with the sample index and file.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <torch/types.h>

#include "data/batch_source.h"
#include "data/dataset.h"
#include "data/transforms.h"
#include "kernels/preprocess.h"

namespace stoker::data {

struct LoaderOptions {
  int64_t batch_size = 128;
  bool shuffle = true;
  bool drop_last = true;
  uint64_t seed = 0;
  int64_t workers = 0;          // threads building batches; 0 = inline
  int64_t prefetch_factor = 2;  // batches in flight per worker
  int64_t device_prefetch = 2;  // batches being copied to the GPU ahead of use (CUDA only)
  bool pin_memory = true;       // pinned batch buffers when the device is CUDA
  int64_t shard_rank = 0;       // this process's share of each epoch: samples rank, rank + count, ...
  int64_t shard_count = 1;
  bool skip_bad_samples = true;  // replace an unreadable sample (and warn) instead of failing
  std::vector<TransformSpec> transforms;
  std::vector<double> mean{0.0};  // per channel, 0..1 scale
  std::vector<double> std{1.0};
  bool channels_last = false;  // hand out inputs in channels-last memory format
  // The inputs' dtype: float32, or bfloat16 / float16 for mixed-precision training (half the bytes;
  // normalised in float32, then rounded once).
  torch::ScalarType input_dtype = torch::kFloat32;
  // Hand out the uint8 batch as built, [B, H, W, C], without conversion or normalisation (for
  // benchmarks that compare with loaders producing uint8, and for code that normalises itself).
  bool output_uint8 = false;
  torch::Device device = torch::kCPU;
  // Receives warnings (bad samples, fallbacks). Default: spdlog's default logger.
  std::function<void(const std::string&)> warn;
};

class Loader : public BatchSource {
 public:
  Loader(std::shared_ptr<Dataset> dataset, LoaderOptions options);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  int64_t num_batches() const override;
  int64_t num_samples() const override { return static_cast<int64_t>(shard_size_); }
  int64_t channels() const override { return channels_; }
  int64_t out_height() const override { return out_height_; }
  int64_t out_width() const override { return out_width_; }
  const Dataset& dataset() const { return *dataset_; }
  const LoaderOptions& options() const { return options_; }
  bool pinned() const { return pinned_; }
  // The pool's host buffers (allocated once, reused for every batch).
  std::vector<const void*> host_buffers() const;

  // Starts `epoch` at batch `first_batch` (to resume mid-epoch). Abandons any epoch in progress.
  // Nothing is built before the first call.
  void start_epoch(int64_t epoch, int64_t first_batch = 0) override;
  // The next batch of the epoch, or nothing at its end. Rethrows a worker's error.
  std::optional<Batch> next() override;
  StageTimes take_times() override;
  // Files of the samples skipped as unreadable so far.
  std::vector<std::string> bad_samples() const;

 private:
  struct HostBatch;
  struct InFlight;
  struct CopyStream;  // the CUDA side stream of the device prefetcher

  void worker_loop(int64_t worker);
  void fill(HostBatch& batch, int64_t epoch, int64_t index, const std::vector<int64_t>& order);
  void fill_sample(int64_t sample, uint8_t* slot, int64_t& label, uint64_t seed);
  void load_sample(int64_t sample, uint8_t* slot, int64_t& label, uint64_t seed);
  HostBatch* take_ready_batch();
  void release(HostBatch* batch);
  Batch to_device(HostBatch& batch);
  void stop_workers();

  std::shared_ptr<Dataset> dataset_;
  LoaderOptions options_;
  TransformPipeline pipeline_;
  int64_t channels_ = 0, out_height_ = 0, out_width_ = 0;
  size_t shard_size_ = 0;
  bool pinned_ = false;
  kernels::PreprocessOptions normalise_;  // mean and 1/std per channel, folded with 255; dtype, layout

  // The epoch being served: sample order and progress.
  std::shared_ptr<const std::vector<int64_t>> order_;
  int64_t epoch_ = 0, end_batch_ = 0, next_batch_ = 0;  // next_batch_: the next one next() returns
  uint64_t generation_ = 0;                             // bumped by start_epoch

  // Batch buffers and their hand-over between workers and the caller.
  std::vector<std::unique_ptr<HostBatch>> buffers_;
  std::vector<HostBatch*> free_;
  std::map<int64_t, HostBatch*> ready_;
  std::vector<int64_t> worker_next_;  // the next batch index each worker builds
  mutable std::mutex mutex_;
  std::condition_variable work_cv_, ready_cv_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
  std::deque<std::unique_ptr<InFlight>> in_flight_;  // device prefetcher (CUDA)
  std::unique_ptr<CopyStream> copy_stream_;

  // Timing (nanoseconds) and bad samples.
  std::atomic<int64_t> read_ns_{0}, decode_ns_{0}, transform_ns_{0}, bad_count_{0};
  int64_t wait_ns_ = 0, copy_ns_ = 0, samples_ = 0, batches_ = 0;
  mutable std::mutex bad_mutex_;
  std::vector<std::string> bad_names_;
};

// Throughput of a loader alone, without a model: what `trainer bench-data` reports.
struct DataBenchResult {
  int64_t batches = 0, samples = 0;
  double seconds = 0, samples_per_s = 0;
  double cpu_seconds = 0;  // user + system CPU time of the process during the measurement
  StageTimes stages;       // summed over workers: seconds of CPU per stage
};
// Takes `warmup` batches, then times `batches` more (starting new epochs as needed).
DataBenchResult bench_loader(Loader& loader, int64_t batches, int64_t warmup = 5);

// A 64-bit mix of its inputs (splitmix64 finaliser), the root of all per-sample randomness.
uint64_t mix_seed(uint64_t seed, uint64_t a, uint64_t b = 0);

}  // namespace stoker::data
