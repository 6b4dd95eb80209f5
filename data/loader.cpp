// The Loader: workers, batch scheduling and ordering around the sampler, the sample pipeline and the
// device prefetcher (see loader.h); and bench_loader.
#include "data/loader.h"

#include <sys/resource.h>

#include <ATen/core/CachingHostAllocator.h>

#include <fmt/format.h>
#include <opencv2/core.hpp>
#include <spdlog/spdlog.h>
#include <torch/cuda.h>

#include "common/error.h"
#include "data/stage_clock.h"
#include "data/transform_options.h"

namespace stoker::data {

// ---- options ------------------------------------------------------------------------------------------

SamplerOptions LoaderOptions::sampler() const {
  return SamplerOptions()
      .set_batch_size(batch_size)
      .set_shuffle(shuffle)
      .set_drop_last(drop_last)
      .set_seed(seed)
      .set_rank(shard_rank)
      .set_world_size(shard_count)
      .set_even_shards(even_shards)
      .set_step_batches(step_batches)
      .set_repeats(repeats);
}

SamplePipelineOptions LoaderOptions::pipeline() const {
  return SamplePipelineOptions()
      .set_transforms(make_transform_pipeline(transforms))
      .set_skip_bad_samples(skip_bad_samples)
      .set_exclude_bad_samples(exclude_bad_samples)
      .set_max_image_pixels(max_image_pixels)
      .set_warn(warn);
}

NormalizeOptions LoaderOptions::normalize() const {
  return NormalizeOptions().set_mean(mean).set_std(std).set_dtype(input_dtype).set_channels_last(channels_last);
}

PrefetcherOptions LoaderOptions::prefetcher() const {
  PrefetcherOptions o;
  o.device = device;
  o.depth = device_prefetch;
  o.pinned = device.is_cuda() && pin_memory;
  o.output_uint8 = output_uint8;
  return o;
}

namespace {
// uint8 batches are handed out as built: their normaliser never runs, so data.mean and data.std need not
// match the images' channels.
NormalizeOptions normalize_options(const LoaderOptions& o, int64_t channels) {
  if (!o.output_uint8) return o.normalize();
  return o.normalize().set_mean(std::vector<double>(channels, 0.0)).set_std(std::vector<double>(channels, 1.0));
}

// Checks the scheduling options (the parts check their own) and sets the default warning sink.
LoaderOptions checked(LoaderOptions o) {
  STOKER_CHECK(o.workers >= 0 && o.prefetch_factor >= 1 && o.device_prefetch >= 1,
               "workers must be >= 0, and prefetch_factor and device_prefetch >= 1; got {}, {} and {}",
               o.workers, o.prefetch_factor, o.device_prefetch);
  if (!o.warn) o.warn = [](const std::string& m) { spdlog::warn("{}", m); };
  return o;
}

int64_t size_of(const std::shared_ptr<Dataset>& dataset) {
  STOKER_CHECK(dataset != nullptr && dataset->size() > 0, "the data set is empty");
  return dataset->size();
}

// The sampler's options with the data set's shards (for the shard-locality order).
SamplerOptions sampler_options(const LoaderOptions& o, const Dataset& dataset) {
  Dataset::ShardLayout layout = dataset.shard_layout();
  return o.sampler().set_shard_window(std::move(layout.ends), layout.window);
}

// Buffers: the workers' window, the device prefetcher's, and one being handed out.
int64_t pool_size(const LoaderOptions& o) {
  return std::max<int64_t>(1, o.workers) * o.prefetch_factor + (o.device.is_cuda() ? o.device_prefetch : 0) + 1;
}

}  // namespace

// ---- set-up ---------------------------------------------------------------------------------------------

Loader::Loader(std::shared_ptr<Dataset> dataset, LoaderOptions options)
    : options_(checked(std::move(options))),
      sampler_(size_of(dataset), sampler_options(options_, *dataset)),
      pipeline_(std::move(dataset), options_.pipeline()),
      pool_(pool_size(options_), options_.batch_size, pipeline_.out_height(), pipeline_.out_width(),
            pipeline_.channels(), options_.prefetcher().pinned),
      prefetcher_(options_.prefetcher(), Normalizer(pipeline_.channels(), normalize_options(options_, pipeline_.channels())),
                  [this](HostBatch* b) { release(b); }) {
  STOKER_CHECK(pipeline_.fixed_output(),
               "{}: images differ in size, so the transforms must end in a fixed-size crop "
               "(random_resized_crop, center_crop or random_crop) to make equal batch slots",
               pipeline_.dataset().describe(0));
  // Workers run their own OpenCV calls single-threaded: the parallelism is the workers.
  if (options_.workers > 0) cv::setNumThreads(0);
  // Nothing is built until start_epoch() says which epoch (the sampler has no batches until then).
  worker_next_.assign(static_cast<size_t>(options_.workers), 0);
  for (int64_t w = 0; w < options_.workers; ++w) threads_.emplace_back([this, w] { worker_loop(w); });
}

Loader::~Loader() { stop_workers(); }

void Loader::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  ready_cv_.notify_all();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

void Loader::retire() {
  stop_workers();
  prefetcher_.clear();
  std::lock_guard<std::mutex> lock(mutex_);
  ready_.clear();
  const bool pinned = pool_.pinned();
  pool_.free_all();
  retired_ = true;
  // Pinned blocks go back to the caching host allocator, which keeps every size it ever handed out:
  // a loader replaced at each new resolution (or worker count) would pin memory for good each time
  // (issue 33, G26). Its free blocks are given back to the system here; the new loader pins its own.
  if (pinned) at::getHostAllocator(at::kCUDA)->empty_cache();
}

void Loader::start_epoch(int64_t epoch, int64_t first_batch) {
  STOKER_CHECK(!retired_, "this loader was retired (a RetunableLoader replaced it); use the one that replaced it");
  STOKER_CHECK(first_batch >= 0 && first_batch <= num_batches(),
               "cannot start at batch {} of an epoch of {} batches", first_batch, num_batches());
  prefetcher_.clear();  // waits for the copies in flight; their buffers go back to the pool
  std::lock_guard<std::mutex> lock(mutex_);
  ++generation_;
  for (auto& [index, batch] : ready_) pool_.release(batch);
  ready_.clear();
  sampler_.start_epoch(epoch, first_batch);
  for (size_t w = 0; w < worker_next_.size(); ++w) worker_next_[w] = first_batch + static_cast<int64_t>(w);
  work_cv_.notify_all();
}

// ---- building batches --------------------------------------------------------------------------------------

void Loader::fill(HostBatch& batch, const SampledBatch& sampled, SampleWork& work) {
  batch.index = sampled.index;
  batch.count = sampled.count;
  batch.digest = 0;
  batch.error = nullptr;
  uint8_t* images = batch.images.data_ptr<uint8_t>();
  int64_t* labels = batch.labels.data_ptr<int64_t>();
  const int64_t slot_bytes = pipeline_.slot_bytes();
  work.raw.epoch = sampled.epoch;  // the data set may read it (synthetic slow_from_epoch)
  for (int64_t slot = 0; slot < batch.count; ++slot) {
    const int64_t sample = sampled.sample(slot);
    const uint64_t seed = sample_seed(options_.seed, sampled.epoch, sample, sampled.repeat(slot));
    batch.digest ^= sample_digest(sample, seed);
    try {
      labels[slot] = pipeline_.fill(sample, seed, images + slot * slot_bytes, work);
    } catch (const std::exception& e) {
      throw Error(fmt::format("data loading failed at batch {}, sample {} ({}): {}", sampled.index, sample,
                              pipeline_.dataset().describe(sample), e.what()));
    }
  }
}

void Loader::worker_loop(int64_t worker) {
  const int64_t workers = options_.workers;
  const int64_t window = workers * options_.prefetch_factor;
  SampleWork work;  // this worker's buffers, reused from sample to sample
  trace::name_thread(fmt::format("loader worker {}", worker));
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    work_cv_.wait(lock, [&] {
      const int64_t b = worker_next_[worker];
      return stopping_ || (b < sampler_.end_batch() && b < sampler_.position().batch + window && pool_.has_free());
    });
    if (stopping_) return;
    const int64_t index = worker_next_[worker];
    worker_next_[worker] += workers;
    HostBatch* batch = pool_.acquire();
    const uint64_t generation = generation_;
    const SampledBatch sampled = sampler_.batch(sampler_.order(), index);
    lock.unlock();
    try {
      fill(*batch, sampled, work);
    } catch (...) {
      batch->error = std::current_exception();
    }
    batch->generation = generation;
    lock.lock();
    if (generation != generation_) {  // the epoch was restarted meanwhile
      pool_.release(batch);
      work_cv_.notify_all();
      continue;
    }
    ready_[index] = batch;
    ready_cv_.notify_all();
  }
}

// The next batch of the epoch, built by the calling thread (workers = 0).
HostBatch* Loader::take_built_batch() {
  HostBatch* batch = nullptr;
  std::optional<SampledBatch> sampled;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    batch = pool_.acquire();
    sampled = sampler_.next();
  }
  STOKER_CHECK(batch != nullptr && sampled.has_value(), "the loader has no free buffer or no batch left");
  try {
    fill(*batch, *sampled, inline_work_);
  } catch (...) {
    batch->error = std::current_exception();
  }
  return batch;
}

// The next batch of the epoch, in order: built inline, or waited for from the workers.
HostBatch* Loader::take_ready_batch() {
  if (options_.workers == 0) return take_built_batch();
  const int64_t t0 = now_ns();
  std::unique_lock<std::mutex> lock(mutex_);
  const int64_t index = sampler_.position().batch;
  ready_cv_.wait(lock, [&] { return stopping_ || ready_.count(index) > 0; });
  STOKER_CHECK(!stopping_, "the loader is shutting down");
  HostBatch* batch = ready_[index];
  ready_.erase(index);
  (void)sampler_.next();
  lock.unlock();
  work_cv_.notify_all();
  const int64_t t1 = now_ns();
  wait_ns_ += t1 - t0;
  trace::record("wait for batch", t0, t1);
  return batch;
}

void Loader::release(HostBatch* batch) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pool_.release(batch);
  }
  work_cv_.notify_all();
}

// ---- handing out ---------------------------------------------------------------------------------------

Batch Loader::counted(Batch batch) {
  samples_ += batch.size();
  ++batches_;
  return batch;
}

std::optional<Batch> Loader::next() {
  STOKER_CHECK(!retired_, "this loader was retired (a RetunableLoader replaced it); use the one that replaced it");
  auto take = [this] {
    HostBatch* host = take_ready_batch();
    if (host->error) {
      std::exception_ptr error = host->error;
      host->error = nullptr;
      release(host);
      std::rethrow_exception(error);
    }
    return host;
  };
  if (prefetcher_.asynchronous()) {
    // Keep `device_prefetch` copies in flight on the side stream, then hand out the oldest.
    while (prefetcher_.wants_more() && !sampler_.done()) prefetcher_.push(take());
    if (prefetcher_.empty()) return std::nullopt;
    return counted(prefetcher_.pop());
  }
  if (sampler_.done()) return std::nullopt;
  HostBatch* host = take();
  std::optional<Batch> batch;
  try {
    batch = prefetcher_.convert(*host);
  } catch (...) {
    release(host);
    throw;
  }
  release(host);
  return counted(std::move(*batch));
}

StageTimes Loader::take_times() {
  StageTimes t = pipeline_.take_times();
  t.wait = static_cast<double>(wait_ns_) * 1e-9;
  t.copy = prefetcher_.take_copy_seconds();
  t.samples = samples_;
  t.batches = batches_;
  wait_ns_ = samples_ = batches_ = 0;
  return t;
}

// ---- measuring -------------------------------------------------------------------------------------------

namespace {
double cpu_seconds_now() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto secs = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) * 1e-6; };
  return secs(usage.ru_utime) + secs(usage.ru_stime);
}
}  // namespace

DataBenchResult bench_loader(BatchSource& source, int64_t batches, int64_t warmup) {
  int64_t epoch = 0;
  source.start_epoch(epoch);
  auto next = [&]() {
    std::optional<Batch> b = source.next();
    if (!b) {
      source.start_epoch(++epoch);
      b = source.next();
    }
    STOKER_CHECK(b.has_value(), "the batch source produced no batch");
    return *b;
  };
  for (int64_t i = 0; i < warmup; ++i) (void)next();
  source.take_times();
  DataBenchResult r;
  const double cpu0 = cpu_seconds_now();
  const int64_t t0 = now_ns();
  bool on_gpu = false;
  for (int64_t i = 0; i < batches; ++i) {
    const Batch b = next();
    on_gpu = on_gpu || b.target.is_cuda();
    r.samples += b.size();
    ++r.batches;
  }
  if (on_gpu) torch::cuda::synchronize();
  r.seconds = static_cast<double>(now_ns() - t0) * 1e-9;
  r.cpu_seconds = cpu_seconds_now() - cpu0;
  r.samples_per_s = r.seconds > 0 ? static_cast<double>(r.samples) / r.seconds : 0;
  r.stages = source.take_times();
  return r;
}

}  // namespace stoker::data
