// From a filled host batch to a Batch on the device: the pool of batch buffers (allocated once,
// pinned when batches go to a GPU, reused) and the device prefetcher.
//
// On a CUDA device in a build with Stoker's CUDA parts the prefetcher copies each uint8 batch on a
// side stream, `depth` batches ahead of use; the compute stream waits for a batch's copy on the GPU
// (an event), and its host buffer goes back to the pool only once the copy has finished. Elsewhere
// (the CPU, or a GPU without those parts) each batch is copied and converted when it is handed out;
// on a GPU its buffer is again released only after an event says the copy is done. Conversion is the
// one Normalizer (data/normalize.h), unless the uint8 batch is asked for as it is.
#pragma once

#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <vector>

#include <torch/types.h>

#include "data/batch_source.h"
#include "data/normalize.h"

namespace stoker::data {

// A reusable batch buffer: uint8 images [B, H, W, C] and int64 labels [B].
struct HostBatch {
  torch::Tensor images, labels;
  int64_t index = -1, count = 0;  // the batch's index in its epoch, and the samples filled
  uint64_t generation = 0;        // which start of an epoch it was built for (the Loader's count)
  uint64_t digest = 0;            // Batch::digest of the samples filled
  std::exception_ptr error;       // building it failed: rethrown where it is handed out
};

// The batch buffers. Not thread-safe: its owner (the Loader) holds a lock around it.
class HostBatchPool {
 public:
  HostBatchPool(int64_t count, int64_t batch_size, int64_t height, int64_t width, int64_t channels,
                bool pinned);
  HostBatch* acquire();  // a free buffer, or nullptr when all are in use
  void release(HostBatch* batch);
  bool has_free() const { return !free_.empty(); }
  bool pinned() const { return pinned_; }
  // Every buffer's image memory (allocated once: the pool never grows).
  std::vector<const void*> buffers() const;
  // Gives every buffer's memory back (none may be in use); the pool is empty from then on.
  void free_all();

 private:
  bool pinned_;
  std::vector<std::unique_ptr<HostBatch>> all_;
  std::vector<HostBatch*> free_;
};

struct PrefetcherOptions {
  torch::Device device = torch::kCPU;
  int64_t depth = 2;          // batches being copied ahead of use (the asynchronous path)
  bool pinned = false;        // the host buffers are pinned (copies may then be asynchronous)
  bool output_uint8 = false;  // hand out the uint8 [B, H, W, C] batch without normalising
};

class DevicePrefetcher {
 public:
  // Gives a host buffer back to its pool once nothing reads it any more.
  using Release = std::function<void(HostBatch*)>;
  DevicePrefetcher(PrefetcherOptions options, Normalizer normalize, Release release);
  ~DevicePrefetcher();  // waits for the copies in flight (their buffers are not released)
  DevicePrefetcher(const DevicePrefetcher&) = delete;
  DevicePrefetcher& operator=(const DevicePrefetcher&) = delete;

  // Whether copies run ahead on a side stream (push/pop); otherwise each batch goes through convert().
  bool asynchronous() const;
  // Asynchronous path: room for another copy in flight; whether none is in flight.
  bool wants_more() const { return static_cast<int64_t>(in_flight_.size()) < options_.depth; }
  bool empty() const { return in_flight_.empty(); }
  // Starts copying `host` to the device on the side stream.
  void push(HostBatch* host);
  // The oldest batch pushed, usable on the current stream; its host buffer has been released.
  Batch pop();
  // Synchronous path: `host` as a Batch on the device. `host` may be reused once this returns.
  Batch convert(HostBatch& host);
  // Waits for the copies in flight and releases their buffers (an epoch abandoned).
  void clear();
  // Caller's seconds spent copying and converting since the last call.
  double take_copy_seconds();

 private:
  struct InFlight;
  struct CopyStream;
  PrefetcherOptions options_;
  Normalizer normalize_;
  Release release_;
  std::deque<std::unique_ptr<InFlight>> in_flight_;
  std::unique_ptr<CopyStream> copy_stream_;
  int64_t copy_ns_ = 0;
};

// Copies `host` tensors to `device` (a GPU) on a side stream, so that the copies overlap the work
// queued on the current (compute) stream, which waits for them on the GPU; the host waits for the
// copies alone when `host_waits` (their host memory is about to be reused), never for the compute.
// Through c10's device-generic stream API: it needs no CUDA headers (builds without Stoker's CUDA
// parts use it). `non_blocking`: the host tensors are pinned.
std::vector<torch::Tensor> copy_on_side_stream(const std::vector<torch::Tensor>& host, torch::Device device,
                                               bool non_blocking, bool host_waits);

}  // namespace stoker::data
