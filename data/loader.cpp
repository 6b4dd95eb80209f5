#include "data/loader.h"

#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <cstring>

#include <fmt/format.h>
#include <opencv2/core.hpp>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include "common/error.h"

#ifdef STOKER_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace stoker::data {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The samples of `epoch` for shard `rank` of `count`: a permutation of 0..n-1 that depends only on
// (seed, epoch), of which the shard takes every count-th entry.
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle, int64_t rank,
                                 int64_t count) {
  std::vector<int64_t> all(n);
  for (int64_t i = 0; i < n; ++i) all[i] = i;
  if (shuffle) {
    uint64_t state = mix_seed(seed, 0x5348554646ull /* "SHUFF" */, static_cast<uint64_t>(epoch));
    for (int64_t i = n - 1; i > 0; --i) {
      state = mix_seed(state, static_cast<uint64_t>(i));
      std::swap(all[i], all[static_cast<int64_t>(state % static_cast<uint64_t>(i + 1))]);
    }
  }
  if (count == 1) return all;
  std::vector<int64_t> mine;
  for (int64_t i = rank; i < n; i += count) mine.push_back(all[i]);
  return mine;
}

}  // namespace

uint64_t mix_seed(uint64_t seed, uint64_t a, uint64_t b) {
  return splitmix64(splitmix64(splitmix64(seed) ^ a) ^ b);
}

// A reusable batch buffer: uint8 images [B, H, W, C] and int64 labels [B], pinned for CUDA.
struct Loader::HostBatch {
  torch::Tensor images, labels;
  int64_t index = -1, count = 0;
  uint64_t generation = 0;
  std::exception_ptr error;
};

// A batch whose copy to the GPU has been started on the side stream.
struct Loader::InFlight {
  HostBatch* host = nullptr;
  torch::Tensor images, labels;  // on the device
#ifdef STOKER_WITH_CUDA
  at::cuda::CUDAEvent copied;
#endif
};

// The side stream the prefetcher copies on (empty without CUDA).
struct Loader::CopyStream {
#ifdef STOKER_WITH_CUDA
  explicit CopyStream(torch::Device device)
      : stream(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index())) {}
  c10::cuda::CUDAStream stream;
#endif
};

// ---- set-up ---------------------------------------------------------------------------------------------

Loader::Loader(std::shared_ptr<Dataset> dataset, LoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  const LoaderOptions& o = options_;
  STOKER_CHECK(dataset_ != nullptr && dataset_->size() > 0, "the data set is empty");
  STOKER_CHECK(o.batch_size > 0, "data.batch_size must be positive, got {}", o.batch_size);
  STOKER_CHECK(o.workers >= 0 && o.prefetch_factor >= 1 && o.device_prefetch >= 1,
               "data.workers must be >= 0, data.prefetch_factor and data.device_prefetch >= 1");
  STOKER_CHECK(o.shard_count >= 1 && o.shard_rank >= 0 && o.shard_rank < o.shard_count,
               "shard rank {} of {} is out of range", o.shard_rank, o.shard_count);
  if (!options_.warn) options_.warn = [](const std::string& m) { spdlog::warn("{}", m); };
  pipeline_ = TransformPipeline(o.transforms);
  channels_ = dataset_->channels();
  if (dataset_->height() > 0) {
    std::tie(out_height_, out_width_) = pipeline_.output_size(dataset_->height(), dataset_->width());
  } else {
    STOKER_CHECK(pipeline_.fixed_output(),
                 "{}: images differ in size, so the transforms must end in a fixed-size crop "
                 "(random_resized_crop, center_crop or random_crop) to make equal batch slots",
                 dataset_->describe(0));
    std::tie(out_height_, out_width_) = pipeline_.output_size(100, 100);
  }
  STOKER_CHECK(out_height_ > 0 && out_width_ > 0, "the transforms produce an empty image");
  STOKER_CHECK(static_cast<int64_t>(o.mean.size()) == channels_ && static_cast<int64_t>(o.std.size()) == channels_,
               "images have {} channel(s) but normalisation has {} mean and {} std values; give one "
               "per channel",
               channels_, o.mean.size(), o.std.size());
  const int64_t n = dataset_->size();
  shard_size_ = static_cast<size_t>((n - o.shard_rank + o.shard_count - 1) / o.shard_count);
  STOKER_CHECK(!o.drop_last || static_cast<int64_t>(shard_size_) >= o.batch_size,
               "{} samples are fewer than one batch of {} with drop_last; lower the batch size",
               shard_size_, o.batch_size);

  std::vector<float> mean, inv_std;
  for (int64_t c = 0; c < channels_; ++c) {
    STOKER_CHECK(o.std[c] > 0, "normalisation std[{}] must be positive, got {}", c, o.std[c]);
    mean.push_back(static_cast<float>(o.mean[c] * 255.0));
    inv_std.push_back(static_cast<float>(1.0 / (o.std[c] * 255.0)));
  }
  STOKER_CHECK(o.input_dtype == torch::kFloat32 || o.input_dtype == torch::kBFloat16 ||
                   o.input_dtype == torch::kFloat16,
               "the loader's input dtype must be float32, bfloat16 or float16, got {}",
               c10::toString(o.input_dtype));
  normalise_.mean = mean;
  normalise_.inv_std = inv_std;
  normalise_.dtype = o.input_dtype;
  normalise_.channels_last = o.channels_last;

  // Buffers: the workers' window, the device prefetcher's, and one being handed out.
  pinned_ = o.device.is_cuda() && o.pin_memory;
  const bool prefetching = o.device.is_cuda();
  const int64_t count = std::max<int64_t>(1, o.workers) * o.prefetch_factor +
                        (prefetching ? o.device_prefetch : 0) + 1;
  const auto u8 = torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(pinned_);
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64).pinned_memory(pinned_);
  for (int64_t i = 0; i < count; ++i) {
    auto b = std::make_unique<HostBatch>();
    b->images = torch::empty({o.batch_size, out_height_, out_width_, channels_}, u8);
    b->labels = torch::empty({o.batch_size}, i64);
    free_.push_back(b.get());
    buffers_.push_back(std::move(b));
  }
  // Workers run their own OpenCV calls single-threaded: the parallelism is the workers.
  if (o.workers > 0) cv::setNumThreads(0);
  worker_next_.assign(static_cast<size_t>(o.workers), 0);
  // Nothing is built until start_epoch() says which epoch (end_batch_ is 0 until then).
  order_ = std::make_shared<const std::vector<int64_t>>();
  for (int64_t w = 0; w < o.workers; ++w) threads_.emplace_back([this, w] { worker_loop(w); });
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
#ifdef STOKER_WITH_CUDA
  for (auto& f : in_flight_) f->copied.synchronize();
#endif
  in_flight_.clear();
}

int64_t Loader::num_batches() const {
  const auto n = static_cast<int64_t>(shard_size_), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

void Loader::start_epoch(int64_t epoch, int64_t first_batch) {
  STOKER_CHECK(first_batch >= 0 && first_batch <= num_batches(),
               "cannot start at batch {} of an epoch of {} batches", first_batch, num_batches());
  std::lock_guard<std::mutex> lock(mutex_);
  ++generation_;
  for (auto& [index, batch] : ready_) free_.push_back(batch);
  ready_.clear();
#ifdef STOKER_WITH_CUDA
  for (auto& f : in_flight_) {
    f->copied.synchronize();
    free_.push_back(f->host);
  }
#endif
  in_flight_.clear();
  epoch_ = epoch;
  order_ = std::make_shared<const std::vector<int64_t>>(
      epoch_order(dataset_->size(), options_.seed, epoch, options_.shuffle, options_.shard_rank,
                  options_.shard_count));
  end_batch_ = num_batches();
  next_batch_ = first_batch;
  for (size_t w = 0; w < worker_next_.size(); ++w) worker_next_[w] = first_batch + static_cast<int64_t>(w);
  work_cv_.notify_all();
}

// ---- building batches --------------------------------------------------------------------------------------

void Loader::load_sample(int64_t sample, uint8_t* slot, int64_t& label, uint64_t seed) {
  thread_local RawSample raw;
  thread_local Image decoded;
  const int64_t t0 = now_ns();
  dataset_->read(sample, raw);
  const int64_t t1 = now_ns();
  label = raw.label;
  SampleRng rng(seed);
  SamplePlan plan;
  int64_t t2 = t1;
  if (raw.encoded) {
    const std::string name = dataset_->describe(sample);
    const ImageInfo info = probe_image(raw.bytes.data(), raw.bytes.size(), name);
    plan = pipeline_.plan(info.height, info.width, rng);
    const Region have = needed_region(plan, info.height, info.width);
    if (have.width > 0 && have.height > 0) {
      DecodeOptions d;
      d.region = have;
      d.channels = static_cast<int>(channels_);
      // Decode at the smallest DCT scale that still leaves at least the output resolution.
      d.min_width = static_cast<int64_t>(std::ceil(double(plan.out_width) * have.width / plan.region.width));
      d.min_height = static_cast<int64_t>(std::ceil(double(plan.out_height) * have.height / plan.region.height));
      decode_image(raw.bytes.data(), raw.bytes.size(), d, decoded, name);
    }
    t2 = now_ns();
    STOKER_CHECK(plan.out_height == out_height_ && plan.out_width == out_width_,
                 "{}: the transforms give {}x{} but batch slots are {}x{}", name, plan.out_height,
                 plan.out_width, out_height_, out_width_);
    if (have.width > 0 && have.height > 0) {
      apply_plan(decoded, have, plan, slot);
    } else {
      std::memset(slot, 0, static_cast<size_t>(out_height_ * out_width_ * channels_));
    }
  } else {
    const Image& im = raw.image;
    STOKER_CHECK(im.channels == channels_, "{}: {} channel(s), expected {}", dataset_->describe(sample),
                 im.channels, channels_);
    plan = pipeline_.plan(im.height, im.width, rng);
    STOKER_CHECK(plan.out_height == out_height_ && plan.out_width == out_width_,
                 "{}: the transforms give {}x{} but batch slots are {}x{}", dataset_->describe(sample),
                 plan.out_height, plan.out_width, out_height_, out_width_);
    apply_plan(im, Region{0, 0, im.width, im.height}, plan, slot);
  }
  const int64_t t3 = now_ns();
  read_ns_ += t1 - t0;
  decode_ns_ += t2 - t1;
  transform_ns_ += t3 - t2;
}

void Loader::fill_sample(int64_t sample, uint8_t* slot, int64_t& label, uint64_t seed) {
  try {
    load_sample(sample, slot, label, seed);
    return;
  } catch (const Error& e) {
    if (!options_.skip_bad_samples) throw;
    ++bad_count_;
    {
      std::lock_guard<std::mutex> lock(bad_mutex_);
      bad_names_.push_back(dataset_->describe(sample));
    }
    options_.warn(fmt::format("skipping bad sample {}: {}", sample, e.what()));
  }
  // Replace it with another sample, chosen deterministically, so that the batch stays full.
  const int64_t n = dataset_->size();
  for (int64_t k = 1; k <= 16; ++k) {
    const int64_t other = (sample + k * 7919) % n;
    try {
      load_sample(other, slot, label, mix_seed(seed, static_cast<uint64_t>(k)));
      return;
    } catch (const Error&) {
    }
  }
  STOKER_FAIL("sample {} ({}) and 16 replacements could not be read; is the data set damaged?", sample,
              dataset_->describe(sample));
}

void Loader::fill(HostBatch& batch, int64_t epoch, int64_t index, const std::vector<int64_t>& order) {
  const int64_t begin = index * options_.batch_size;
  const int64_t end = std::min<int64_t>(begin + options_.batch_size, static_cast<int64_t>(order.size()));
  batch.index = index;
  batch.count = end - begin;
  batch.error = nullptr;
  uint8_t* images = batch.images.data_ptr<uint8_t>();
  int64_t* labels = batch.labels.data_ptr<int64_t>();
  const int64_t slot_bytes = out_height_ * out_width_ * channels_;
  for (int64_t slot = 0; slot < batch.count; ++slot) {
    const int64_t sample = order[begin + slot];
    const uint64_t seed = mix_seed(options_.seed, static_cast<uint64_t>(epoch) + 1, static_cast<uint64_t>(sample));
    try {
      fill_sample(sample, images + slot * slot_bytes, labels[slot], seed);
    } catch (const std::exception& e) {
      throw Error(fmt::format("data loading failed at batch {}, sample {} ({}): {}", index, sample,
                              dataset_->describe(sample), e.what()));
    }
  }
}

void Loader::worker_loop(int64_t worker) {
  const int64_t workers = options_.workers;
  const int64_t window = workers * options_.prefetch_factor;
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    work_cv_.wait(lock, [&] {
      const int64_t b = worker_next_[worker];
      return stopping_ || (b < end_batch_ && b < next_batch_ + window && !free_.empty());
    });
    if (stopping_) return;
    const int64_t index = worker_next_[worker];
    worker_next_[worker] += workers;
    HostBatch* batch = free_.back();
    free_.pop_back();
    const uint64_t generation = generation_;
    const int64_t epoch = epoch_;
    const auto order = order_;
    lock.unlock();
    try {
      fill(*batch, epoch, index, *order);
    } catch (...) {
      batch->error = std::current_exception();
    }
    batch->generation = generation;
    lock.lock();
    if (generation != generation_) {  // the epoch was restarted meanwhile
      free_.push_back(batch);
      work_cv_.notify_all();
      continue;
    }
    ready_[index] = batch;
    ready_cv_.notify_all();
  }
}

Loader::HostBatch* Loader::take_ready_batch() {
  HostBatch* batch = nullptr;
  if (options_.workers == 0) {
    int64_t index;
    std::shared_ptr<const std::vector<int64_t>> order;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      batch = free_.back();
      free_.pop_back();
      index = next_batch_++;
      order = order_;
    }
    try {
      fill(*batch, epoch_, index, *order);
    } catch (...) {
      batch->error = std::current_exception();
    }
    return batch;
  }
  const int64_t t0 = now_ns();
  std::unique_lock<std::mutex> lock(mutex_);
  ready_cv_.wait(lock, [&] { return stopping_ || ready_.count(next_batch_) > 0; });
  STOKER_CHECK(!stopping_, "the loader is shutting down");
  batch = ready_[next_batch_];
  ready_.erase(next_batch_);
  ++next_batch_;
  lock.unlock();
  work_cv_.notify_all();
  wait_ns_ += now_ns() - t0;
  return batch;
}

void Loader::release(HostBatch* batch) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(batch);
  }
  work_cv_.notify_all();
}

// ---- to the device -----------------------------------------------------------------------------------------

namespace {

// uint8 [B, H, W, C] -> float, (x - mean) * inv_std per channel, in one pass over the pixels, as
// NCHW-contiguous or channels-last (the same memory order as the input) float [B, C, H, W].
torch::Tensor normalise_on_cpu(const torch::Tensor& images, const std::vector<float>& mean,
                               const std::vector<float>& inv_std, bool channels_last) {
  const int64_t b = images.size(0), h = images.size(1), w = images.size(2), c = images.size(3);
  const auto format = channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
  torch::Tensor out = torch::empty({b, c, h, w}, torch::TensorOptions().dtype(torch::kFloat32).memory_format(format));
  const uint8_t* src = images.data_ptr<uint8_t>();
  float* dst = out.data_ptr<float>();
  const int64_t plane = h * w;
  at::parallel_for(0, b, 1, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const uint8_t* in = src + n * plane * c;
      float* o = dst + n * plane * c;
      if (channels_last || c == 1) {
        for (int64_t i = 0; i < plane; ++i) {
          for (int64_t k = 0; k < c; ++k) o[i * c + k] = (float(in[i * c + k]) - mean[k]) * inv_std[k];
        }
      } else {
        for (int64_t k = 0; k < c; ++k) {
          float* ok = o + k * plane;
          const float m = mean[k], s = inv_std[k];
          for (int64_t i = 0; i < plane; ++i) ok[i] = (float(in[i * c + k]) - m) * s;
        }
      }
    }
  });
  return out;
}

}  // namespace

Batch Loader::to_device(HostBatch& host) {
  const int64_t t0 = now_ns();
  torch::Tensor images = host.images.narrow(0, 0, host.count);
  torch::Tensor labels = host.labels.narrow(0, 0, host.count);
  Batch batch;
  batch.index = host.index;
  batch.host_buffer = host.images.data_ptr();
  const bool cpu = options_.device.is_cpu();
  if (options_.output_uint8) {
    // The host buffer is reused: hand out a copy.
    batch.input = cpu ? images.clone() : images.to(options_.device, /*non_blocking=*/pinned_);
  } else if (cpu) {
    batch.input = normalise_on_cpu(images, normalise_.mean, normalise_.inv_std, options_.channels_last);
    if (normalise_.dtype != torch::kFloat32) batch.input = batch.input.to(normalise_.dtype);
  } else {
    // On a GPU without the prefetcher (a build without Stoker's CUDA parts): ATen's reference path.
    batch.input = kernels::preprocess_images(images.to(options_.device, /*non_blocking=*/pinned_), normalise_);
  }
  batch.target = cpu ? labels.clone() : labels.to(options_.device, pinned_);
  copy_ns_ += now_ns() - t0;
  samples_ += host.count;
  ++batches_;
  return batch;
}

std::optional<Batch> Loader::next() {
  auto rethrow_if_failed = [this](HostBatch* b) {
    if (!b->error) return;
    std::exception_ptr error = b->error;
    b->error = nullptr;
    release(b);
    std::rethrow_exception(error);
  };
#ifdef STOKER_WITH_CUDA
  if (options_.device.is_cuda()) {
    // Keep `device_prefetch` copies in flight on the side stream, then hand out the oldest.
    if (!copy_stream_) copy_stream_ = std::make_unique<CopyStream>(options_.device);
    const c10::cuda::CUDAStream& side = copy_stream_->stream;
    while (static_cast<int64_t>(in_flight_.size()) < options_.device_prefetch && next_batch_ < end_batch_) {
      HostBatch* host = take_ready_batch();
      rethrow_if_failed(host);
      const int64_t t0 = now_ns();
      auto f = std::make_unique<InFlight>();
      f->host = host;
      {
        c10::cuda::CUDAStreamGuard guard(side);
        f->images = host->images.narrow(0, 0, host->count).to(options_.device, /*non_blocking=*/true);
        f->labels = host->labels.narrow(0, 0, host->count).to(options_.device, /*non_blocking=*/true);
        f->copied.record(side);
      }
      copy_ns_ += now_ns() - t0;
      in_flight_.push_back(std::move(f));
    }
    if (in_flight_.empty()) return std::nullopt;
    std::unique_ptr<InFlight> f = std::move(in_flight_.front());
    in_flight_.pop_front();
    const int64_t t0 = now_ns();
    auto compute = c10::cuda::getCurrentCUDAStream(options_.device.index());
    f->copied.block(compute);                 // compute waits for the copy, on the GPU
    f->images.record_stream(compute);         // allocated on the side stream, used on this one
    f->labels.record_stream(compute);
    f->copied.synchronize();                  // the host buffer is free once its copy is done
    const int64_t index = f->host->index, count = f->host->count;
    const void* host_buffer = f->host->images.data_ptr();
    release(f->host);
    Batch batch;
    batch.index = index;
    batch.host_buffer = host_buffer;
    if (options_.output_uint8) {
      batch.input = f->images;
    } else {
      // One fused kernel on the compute stream: uint8 NHWC -> normalised, in the requested layout.
      batch.input = kernels::preprocess_images(f->images, normalise_);
    }
    batch.target = f->labels;
    copy_ns_ += now_ns() - t0;
    samples_ += count;
    ++batches_;
    return batch;
  }
#endif
  if (next_batch_ >= end_batch_) return std::nullopt;
  HostBatch* host = take_ready_batch();
  rethrow_if_failed(host);
  Batch batch = to_device(*host);
  release(host);
  return batch;
}

std::vector<const void*> Loader::host_buffers() const {
  std::vector<const void*> out;
  for (const auto& b : buffers_) out.push_back(b->images.data_ptr());
  return out;
}

StageTimes Loader::take_times() {
  StageTimes t;
  t.read = read_ns_.exchange(0) * 1e-9;
  t.decode = decode_ns_.exchange(0) * 1e-9;
  t.transform = transform_ns_.exchange(0) * 1e-9;
  t.bad_samples = bad_count_.exchange(0);
  t.wait = wait_ns_ * 1e-9;
  t.copy = copy_ns_ * 1e-9;
  t.samples = samples_;
  t.batches = batches_;
  wait_ns_ = copy_ns_ = samples_ = batches_ = 0;
  return t;
}

std::vector<std::string> Loader::bad_samples() const {
  std::lock_guard<std::mutex> lock(bad_mutex_);
  return bad_names_;
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

DataBenchResult bench_loader(Loader& loader, int64_t batches, int64_t warmup) {
  int64_t epoch = 0;
  loader.start_epoch(epoch);
  auto next = [&]() {
    std::optional<Batch> b = loader.next();
    if (!b) {
      loader.start_epoch(++epoch);
      b = loader.next();
    }
    STOKER_CHECK(b.has_value(), "the loader produced no batch");
    return *b;
  };
  for (int64_t i = 0; i < warmup; ++i) (void)next();
  loader.take_times();
  DataBenchResult r;
  const double cpu0 = cpu_seconds_now();
  const int64_t t0 = now_ns();
  for (int64_t i = 0; i < batches; ++i) {
    const Batch b = next();
    r.samples += b.size();
    ++r.batches;
  }
  if (loader.options().device.is_cuda()) torch::cuda::synchronize();
  r.seconds = (now_ns() - t0) * 1e-9;
  r.cpu_seconds = cpu_seconds_now() - cpu0;
  r.samples_per_s = r.seconds > 0 ? r.samples / r.seconds : 0;
  r.stages = loader.take_times();
  return r;
}

}  // namespace stoker::data
