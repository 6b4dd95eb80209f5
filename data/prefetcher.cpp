// The batch buffer pool and the device prefetcher (see prefetcher.h).
#include "data/prefetcher.h"

#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "common/error.h"
#include "data/stage_clock.h"

#ifdef STOKER_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace stoker::data {

// ---- the pool ----------------------------------------------------------------------------------------------

HostBatchPool::HostBatchPool(int64_t count, int64_t batch_size, int64_t height, int64_t width,
                             int64_t channels, bool pinned)
    : pinned_(pinned) {
  const auto u8 = torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(pinned);
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64).pinned_memory(pinned);
  for (int64_t i = 0; i < count; ++i) {
    auto b = std::make_unique<HostBatch>();
    b->images = torch::empty({batch_size, height, width, channels}, u8);
    b->labels = torch::empty({batch_size}, i64);
    free_.push_back(b.get());
    all_.push_back(std::move(b));
  }
}

HostBatch* HostBatchPool::acquire() {
  if (free_.empty()) return nullptr;
  HostBatch* b = free_.back();
  free_.pop_back();
  return b;
}

void HostBatchPool::release(HostBatch* batch) { free_.push_back(batch); }

void HostBatchPool::free_all() {
  free_.clear();
  all_.clear();
}

std::vector<const void*> HostBatchPool::buffers() const {
  std::vector<const void*> out;
  for (const auto& b : all_) out.push_back(b->images.data_ptr());
  return out;
}

// ---- the prefetcher ------------------------------------------------------------------------------------

// A batch whose copy to the GPU has been started on the side stream.
struct DevicePrefetcher::InFlight {
  HostBatch* host = nullptr;
  torch::Tensor images, labels;  // on the device
#ifdef STOKER_WITH_CUDA
  at::cuda::CUDAEvent copied;
#endif
};

// The side stream the prefetcher copies on (empty without CUDA).
struct DevicePrefetcher::CopyStream {
#ifdef STOKER_WITH_CUDA
  explicit CopyStream(torch::Device device)
      : stream(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index())) {}
  c10::cuda::CUDAStream stream;
#endif
};

DevicePrefetcher::DevicePrefetcher(PrefetcherOptions options, Normalizer normalize, Release release)
    : options_(options), normalize_(std::move(normalize)), release_(std::move(release)) {
  STOKER_CHECK(options_.depth >= 1, "device_prefetch must be >= 1, got {}", options_.depth);
}

DevicePrefetcher::~DevicePrefetcher() {
#ifdef STOKER_WITH_CUDA
  for (auto& f : in_flight_) f->copied.synchronize();
#endif
}

bool DevicePrefetcher::asynchronous() const {
#ifdef STOKER_WITH_CUDA
  return options_.device.is_cuda();
#else
  return false;
#endif
}

void DevicePrefetcher::push(HostBatch* host) {
  STOKER_CHECK(asynchronous(), "DevicePrefetcher::push needs a CUDA device and a build with CUDA");
#ifdef STOKER_WITH_CUDA
  StageTimer<int64_t> timer(copy_ns_, "copy");
  if (!copy_stream_) copy_stream_ = std::make_unique<CopyStream>(options_.device);
  auto f = std::make_unique<InFlight>();
  f->host = host;
  {
    c10::cuda::CUDAStreamGuard guard(copy_stream_->stream);
    f->images = host->images.narrow(0, 0, host->count).to(options_.device, /*non_blocking=*/true);
    f->labels = host->labels.narrow(0, 0, host->count).to(options_.device, /*non_blocking=*/true);
    f->copied.record(copy_stream_->stream);
  }
  in_flight_.push_back(std::move(f));
#endif
}

Batch DevicePrefetcher::pop() {
  STOKER_CHECK(!in_flight_.empty(), "DevicePrefetcher::pop: no batch in flight");
  StageTimer<int64_t> timer(copy_ns_, "copy");
  std::unique_ptr<InFlight> f = std::move(in_flight_.front());
  in_flight_.pop_front();
  Batch batch;
  batch.index = f->host->index;
  batch.digest = f->host->digest;
  batch.host_buffer = f->host->images.data_ptr();
#ifdef STOKER_WITH_CUDA
  auto compute = c10::cuda::getCurrentCUDAStream(options_.device.index());
  f->copied.block(compute);          // compute waits for the copy, on the GPU
  f->images.record_stream(compute);  // allocated on the side stream, used on this one
  f->labels.record_stream(compute);
  f->copied.synchronize();           // the host buffer is free once its copy is done
#endif
  release_(f->host);
  // One fused kernel on the compute stream: uint8 NHWC -> normalised, in the requested layout.
  batch.input = options_.output_uint8 ? f->images : normalize_(f->images);
  batch.target = f->labels;
  return batch;
}


std::vector<torch::Tensor> copy_on_side_stream(const std::vector<torch::Tensor>& host, torch::Device device,
                                               bool non_blocking, bool host_waits) {
  const c10::impl::VirtualGuardImpl guard(device.type());
  const c10::Stream compute = guard.getStream(device);
  const c10::Stream side = guard.getStreamFromGlobalPool(device);
  std::vector<torch::Tensor> out;
  c10::Event copied(device.type());
  {
    const c10::StreamGuard on_side(side);
    for (const torch::Tensor& t : host) out.push_back(t.to(device, non_blocking));
    copied.record(side);
  }
  copied.block(compute);  // the compute stream waits for the copies on the GPU, not the host
  for (torch::Tensor& t : out) t.record_stream(compute);  // allocated on the side stream, used on compute
  if (host_waits) copied.synchronize();
  return out;
}

Batch DevicePrefetcher::convert(HostBatch& host) {
  StageTimer<int64_t> timer(copy_ns_, "copy");
  const torch::Tensor images = host.images.narrow(0, 0, host.count);
  const torch::Tensor labels = host.labels.narrow(0, 0, host.count);
  Batch batch;
  batch.index = host.index;
  batch.digest = host.digest;
  batch.host_buffer = host.images.data_ptr();
  if (options_.device.is_cpu()) {
    // The host buffer is reused: hand out copies.
    batch.input = options_.output_uint8 ? images.clone() : normalize_(images);
    batch.target = labels.clone();
    return batch;
  }
  // A GPU without the prefetcher (a build without Stoker's CUDA parts): copied on a side stream; the
  // host waits for the copy alone (the pooled host buffer is reused once this returns).
  std::vector<torch::Tensor> copies =
      copy_on_side_stream({images, labels}, options_.device, options_.pinned, /*host_waits=*/true);
  batch.target = copies[1];
  batch.input = options_.output_uint8 ? copies[0] : normalize_(copies[0]);
  return batch;
}

void DevicePrefetcher::clear() {
  while (!in_flight_.empty()) {
#ifdef STOKER_WITH_CUDA
    in_flight_.front()->copied.synchronize();
#endif
    release_(in_flight_.front()->host);
    in_flight_.pop_front();
  }
}

double DevicePrefetcher::take_copy_seconds() {
  const double s = static_cast<double>(copy_ns_) * 1e-9;
  copy_ns_ = 0;
  return s;
}

}  // namespace stoker::data
