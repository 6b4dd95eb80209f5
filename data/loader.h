// The batch loader: the data pipeline from a Dataset to a normalised batch on the device, composed
// of its parts:
//
//   Sampler (data/sampler.h)          which samples each batch holds: order, shard, position
//   SamplePipeline (data/pipeline.h)  per sample: read -> decode (the planned region) -> transform,
//                                     written straight into the sample's slot of a batch buffer
//   HostBatchPool, DevicePrefetcher   batch buffers allocated once (pinned for CUDA) and reused; the
//     (data/prefetcher.h)             copy to the GPU on a side stream, `device_prefetch` deep
//   Normalizer (data/normalize.h)     uint8 -> float, normalised, on the device (4x fewer bytes
//                                     cross the bus than float would), in one fused kernel
//
// The Loader itself schedules: `workers` threads build whole batches (0 = the calling thread does),
// with up to `prefetch_factor` batches in flight per worker, handed out in order. All randomness is a
// function of (seed, epoch, sample index), so batches are identical whatever the worker count. Each
// stage is timed. A worker's exception reaches the caller of next() with the sample index and file.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <torch/types.h>

#include "common/options.h"
#include "data/batch_source.h"
#include "data/dataset.h"
#include "data/pipeline.h"
#include "data/prefetcher.h"
#include "data/random.h"
#include "data/sampler.h"

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
  int64_t shard_rank = 0;       // this process's share of each epoch (see SamplerOptions::rank)
  int64_t shard_count = 1;
  bool even_shards = false;     // every shard the same size (see SamplerOptions::even_shards)
  int64_t step_batches = 1;     // batches per optimizer step (see SamplerOptions::step_batches)
  int64_t repeats = 1;          // repeated augmentation (see SamplerOptions::repeats)
  bool skip_bad_samples = true;  // replace an unreadable sample (and warn) instead of failing
  // Exclude an unreadable sample (and warn) instead: zero pixels, target kExcludedTarget (evaluation
  // loaders, whose metrics skip it). Takes precedence over skip_bad_samples.
  bool exclude_bad_samples = false;
  int64_t max_image_pixels = kDefaultMaxImagePixels;  // encoded images claiming more are bad samples
  // Registered transform types with their options, applied in order (data/transform_options.h):
  //   o.transforms = {make_transform("random_crop"), make_transform("horizontal_flip")};
  //   o.transforms[0].as<RandomCropOptions>().size = 32;
  std::vector<TypedOptions> transforms;
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

  // The parts' options, derived from these.
  SamplerOptions sampler() const;
  SamplePipelineOptions pipeline() const;  // builds the transforms
  NormalizeOptions normalize() const;
  PrefetcherOptions prefetcher() const;
};

class Loader : public BatchSource {
 public:
  Loader(std::shared_ptr<Dataset> dataset, LoaderOptions options);
  ~Loader() override;
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  int64_t num_batches() const override { return sampler_.num_batches(); }
  int64_t num_samples() const override { return sampler_.num_samples(); }
  int64_t channels() const override { return pipeline_.channels(); }
  int64_t out_height() const override { return pipeline_.out_height(); }
  int64_t out_width() const override { return pipeline_.out_width(); }
  const Dataset& dataset() const { return pipeline_.dataset(); }
  const LoaderOptions& options() const { return options_; }
  const Sampler& sampler() const { return sampler_; }
  SamplePipeline& pipeline() { return pipeline_; }
  bool pinned() const { return pool_.pinned(); }
  // The pool's host buffers (allocated once, reused for every batch).
  std::vector<const void*> host_buffers() const { return pool_.buffers(); }

  // Starts `epoch` at batch `first_batch` (to resume mid-epoch). Abandons any epoch in progress.
  // Nothing is built before the first call.
  void start_epoch(int64_t epoch, int64_t first_batch = 0) override;
  // The next batch of the epoch, or nothing at its end. Rethrows a worker's error.
  std::optional<Batch> next() override;
  StageTimes take_times() override;
  std::vector<std::string> class_names() const override { return dataset().class_names(); }
  // Files of the samples skipped as unreadable so far.
  std::vector<std::string> bad_samples() const { return pipeline_.bad_samples(); }
  // Stops the workers for good and frees the batch buffers (a RetunableLoader that replaced it), even
  // while others still hold the loader; it then answers its shape and options only: start_epoch and
  // next are errors. Batches already handed out stay valid. Pinned buffers go back to the system, not
  // only to the caching host allocator.
  void retire();

 private:
  void worker_loop(int64_t worker);
  void fill(HostBatch& batch, const SampledBatch& sampled, SampleWork& work);
  HostBatch* take_ready_batch();
  HostBatch* take_built_batch();
  void release(HostBatch* batch);
  Batch counted(Batch batch);
  void stop_workers();

  LoaderOptions options_;
  Sampler sampler_;
  SamplePipeline pipeline_;
  HostBatchPool pool_;
  DevicePrefetcher prefetcher_;

  // Hand-over between the workers and the caller; the sampler and the pool are guarded by mutex_.
  uint64_t generation_ = 0;                 // bumped by start_epoch
  std::map<int64_t, HostBatch*> ready_;     // built batches by index
  std::vector<int64_t> worker_next_;        // the next batch index each worker builds
  SampleWork inline_work_;                  // the calling thread's, with workers = 0
  mutable std::mutex mutex_;
  std::condition_variable work_cv_, ready_cv_;
  bool stopping_ = false;
  bool retired_ = false;
  std::vector<std::thread> threads_;

  int64_t wait_ns_ = 0, samples_ = 0, batches_ = 0;  // the caller's
};

// Throughput of a batch source alone (a Loader, a cached source), without a model: what `trainer
// bench-data` reports.
struct DataBenchResult {
  int64_t batches = 0, samples = 0;
  double seconds = 0, samples_per_s = 0;
  double cpu_seconds = 0;  // user + system CPU time of the process during the measurement
  StageTimes stages;       // summed over workers: seconds of CPU per stage
};
// Takes `warmup` batches, then times `batches` more (starting new epochs as needed).
DataBenchResult bench_loader(BatchSource& source, int64_t batches, int64_t warmup = 5);

}  // namespace stoker::data
