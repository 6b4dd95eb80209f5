#include "trainer/cuda_graph_step.h"

#include <torch/torch.h>

#include "common/error.h"
#include "common/log.h"
#include "trainer/precision.h"

#ifdef STOKER_WITH_CUDA
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace stoker {

#ifdef STOKER_WITH_CUDA
namespace {

// "256x3x192x192"
std::string shape_text(c10::IntArrayRef sizes) {
  std::string out;
  for (const int64_t d : sizes) out += (out.empty() ? "" : "x") + std::to_string(d);
  return out;
}

// at::cuda::CUDAGraph with a look at its capture state, for cleaning up after a failed capture: its
// destructor gives the memory pool back only when the capture ended, and its pool() refuses to name
// the pool before then, so the pool and the device it was made on are read from the members.
struct Graph : at::cuda::CUDAGraph {
  bool capture_ended() const { return capture_ended_; }
  c10::MempoolId_t pool_id() const { return mempool_id_; }  // {0, 0} until capture_begin picks one
  c10::DeviceIndex capture_device() const { return capture_dev_; }
};

// Makes `then` wait for the work queued so far on `first`.
void order(const at::cuda::CUDAStream& first, const at::cuda::CUDAStream& then) {
  at::cuda::CUDAEvent event;
  event.record(first);
  event.block(then);
}

// Calls `f`, logging instead of throwing: clean-up after a failure must not fail itself. Returns
// whether `f` succeeded.
template <typename F>
bool quietly(const char* what, F f) {
  try {
    f();
    return true;
  } catch (const std::exception& e) {
    logger().debug("train.cuda_graph: {} after the failed capture: {}", what, e.what());
    return false;
  }
}

// Gives back the private memory pool of a capture that never ended. CUDAGraph::capture_begin made
// the device and the pinned-host caching allocators allocate into the pool (each taking a reference
// to it) and only capture_end stops that; left as it was, every block allocated on the capture
// stream afterwards would come from the dead graph's pool and never be reused or freed, and the
// eager fallback would leak device memory. `began`: capture_begin returned, so both allocators hold
// a reference (capture_end may already have ended their allocate-to-pool state before it failed).
// When capture_begin threw, an allocator holds one only if ending its state succeeds. Once released,
// the pool's blocks are freed when the tensors still in them (the failed capture's gradients) are
// gone, as when a CUDAGraph is destroyed.
void release_pool_of_failed_capture(const Graph& graph, bool began) {
  const c10::MempoolId_t pool = graph.pool_id();
  if (graph.capture_ended() || (pool.first == 0 && pool.second == 0)) return;
  const c10::DeviceIndex device = graph.capture_device();
  namespace allocator = c10::cuda::CUDACachingAllocator;
  if (quietly("ending the device pool", [&] { allocator::endAllocateToPool(device, pool); }) || began) {
    quietly("releasing the device pool", [&] { allocator::releasePool(device, pool); });
  }
  at::HostAllocator* host = at::getHostAllocator(at::kCUDA);
  if (quietly("ending the host pool", [&] { host->end_allocate_to_pool(pool); }) || began) {
    quietly("releasing the host pool", [&] { host->release_pool(pool); });
  }
}

// Takes the device's default random generator out of capture mode after a failed capture.
// CUDAGraph::capture_begin puts the generator's state into capture mode (capture_prologue) and only
// a capture_end that succeeds takes it out (capture_epilogue); destroying the graph does not. Left
// so, the first random op of the eager fallback (dropout) throws "Offset increment outside graph
// capture encountered unexpectedly". The generator gets a fresh state with the same seed and
// philox offset (the failed capture consumed none of it: a capture counts its offsets apart), so
// the eager steps draw exactly what they would have drawn had no capture been tried.
void restore_generator_after_failed_capture(c10::DeviceIndex device) {
  at::Generator generator = at::cuda::detail::getDefaultCUDAGenerator(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  auto* current = at::check_generator<at::CUDAGeneratorImpl>(generator);
  auto fresh = c10::make_intrusive<at::CUDAGeneratorImpl>(device);
  fresh->set_current_seed(current->current_seed());
  fresh->set_philox_offset_per_thread(current->philox_offset_per_thread());
  current->graphsafe_set_state(fresh);
}

}  // namespace

struct CudaGraphStep::State {
  State(torch::Device device_, StepFunction step_, Hooks hooks_, int warmup_)
      : device(device_), step(std::move(step_)), hooks(std::move(hooks_)), warmup(warmup_) {}

  torch::Device device;
  StepFunction step;
  Hooks hooks;
  int warmup = 3, warmup_done = 0;
  bool disabled = false;
  std::optional<at::cuda::CUDAStream> side;
  std::unique_ptr<Graph> graph;  // made at capture time (its constructor needs CUDA)
  torch::Tensor input, target, loss;

  void capture(const torch::Tensor& in, const torch::Tensor& tgt);
  void undo_failed_capture(bool began);
  void drop_graph();
};

// Lets go of a captured graph (a new input shape): once the device has finished its replays, the
// graph and its memory pool go, and the next calls warm up and capture again.
void CudaGraphStep::State::drop_graph() {
  c10::cuda::device_synchronize();
  if (hooks.before_release) hooks.before_release();
  graph.reset();
  input = target = loss = torch::Tensor();
  warmup_done = 0;
  c10::cuda::CUDACachingAllocator::emptyCache();
}

// Captures the step on static copies of the batch. The capture records the work without doing it,
// so the caller replays the graph once afterwards to train on this batch.
void CudaGraphStep::State::capture(const torch::Tensor& in, const torch::Tensor& tgt) {
  input = in.clone();
  target = tgt.clone();
  if (hooks.before_capture) hooks.before_capture();
  c10::cuda::device_synchronize();
  // As torch.cuda.graph does: the cached blocks the warm-up left go back to the device first, so that
  // the capture's private pool can hold a second working set where the eager steps fit.
  c10::cuda::CUDACachingAllocator::emptyCache();
  bool began = false;
  try {
    AutocastOffForCapture no_outer_autocast(device);
    c10::cuda::CUDAStreamGuard on_side(*side);
    graph = std::make_unique<Graph>();
    graph->capture_begin();
    began = true;
    loss = step(input, target);
    graph->capture_end();
    c10::cuda::device_synchronize();
  } catch (...) {
    undo_failed_capture(began);
    throw;
  }
}

// Ends a capture left open by a failure, so that the stream is usable again, and gives the graph's
// memory pool back (release_pool_of_failed_capture).
void CudaGraphStep::State::undo_failed_capture(bool began) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(side->stream(), &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
    cudaGraph_t broken = nullptr;
    cudaStreamEndCapture(side->stream(), &broken);
    if (broken != nullptr) cudaGraphDestroy(broken);
  }
  (void)cudaGetLastError();
  quietly("restoring the random generator", [&] { restore_generator_after_failed_capture(device.index()); });
  if (graph) release_pool_of_failed_capture(*graph, began);
  graph.reset();
  input = target = loss = torch::Tensor();
}

CudaGraphStep::CudaGraphStep(torch::Device device, StepFunction step, Hooks hooks, int warmup)
    : state_(std::make_unique<State>(device, std::move(step), std::move(hooks), warmup)) {
  if (!device.is_cuda()) disable("it needs a CUDA device");
}

std::optional<torch::Tensor> CudaGraphStep::run(const torch::Tensor& input, const torch::Tensor& target) {
  State& s = *state_;
  if (s.disabled) return std::nullopt;
  if (s.graph) {
    switch (graph_shape_action(s.input.sizes(), input.sizes())) {
      case GraphShapeAction::kReplay: break;
      case GraphShapeAction::kEager: return std::nullopt;
      case GraphShapeAction::kRecapture:
        logger().info("train.cuda_graph: the inputs are now {} (captured at {}); capturing the step again",
                      shape_text(input.sizes()), shape_text(s.input.sizes()));
        s.drop_graph();
        break;
    }
  }
  const at::cuda::CUDAStream ambient = at::cuda::getCurrentCUDAStream(s.device.index());
  if (!s.side) s.side = at::cuda::getStreamFromPool(false, s.device.index());
  if (!s.graph && s.warmup_done < s.warmup) {
    // Warm-up steps run eagerly on the side stream, where the capture will run.
    order(ambient, *s.side);
    torch::Tensor loss;
    {
      c10::cuda::CUDAStreamGuard on_side(*s.side);
      loss = s.step(input, target);
    }
    order(*s.side, ambient);
    ++s.warmup_done;
    return loss.detach();
  }
  if (!s.graph) {
    try {
      s.capture(input, target);
    } catch (const std::exception& e) {
      const std::string why = e.what();
      s.disabled = true;
      const bool memory = dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr ||
                          why.find("out of memory") != std::string::npos;
      logger().warn("train.cuda_graph: the training step could not be captured ({}); training eagerly{}",
                    why.substr(0, why.find('\n')),
                    memory ? ". The capture needs the step's working set a second time, in its own memory pool: "
                             "lower data.batch_size (`trainer doctor --batch` finds the largest that captures) or "
                             "set train.cuda_graph: false"
                           : "");
      if (s.hooks.after_failure) s.hooks.after_failure();
      return std::nullopt;
    }
  }
  s.input.copy_(input, /*non_blocking=*/true);
  s.target.copy_(target, /*non_blocking=*/true);
  s.graph->replay();
  return s.loss.detach().clone();
}

bool CudaGraphStep::active() const { return state_->graph != nullptr && !state_->disabled; }

void CudaGraphStep::recapture() {
  if (state_->graph && !state_->disabled) {
    state_->drop_graph();
    logger().info("train.cuda_graph: the step changed (parameters frozen or released); capturing it again");
  }
}
bool CudaGraphStep::disabled() const { return state_->disabled; }

void CudaGraphStep::recapture(const std::string& why) {
  if (!state_->graph) return;
  logger().info("train.cuda_graph: {}; capturing the step again", why);
  state_->drop_graph();
}

void CudaGraphStep::disable(const std::string& why) {
  if (state_->disabled) return;
  state_->disabled = true;
  logger().warn("train.cuda_graph: training eagerly because {}", why);
}

#else  // a build without Stoker's CUDA parts: never captures

struct CudaGraphStep::State {
  bool disabled = false;
};

CudaGraphStep::CudaGraphStep(torch::Device device, StepFunction, Hooks, int) : state_(std::make_unique<State>()) {
  disable(device.is_cuda() ? "this build of Stoker has no CUDA parts" : "it needs a CUDA device");
}

std::optional<torch::Tensor> CudaGraphStep::run(const torch::Tensor&, const torch::Tensor&) { return std::nullopt; }
void CudaGraphStep::recapture(const std::string&) {}
bool CudaGraphStep::active() const { return false; }
void CudaGraphStep::recapture() {}
bool CudaGraphStep::disabled() const { return state_->disabled; }

void CudaGraphStep::disable(const std::string& why) {
  if (state_->disabled) return;
  state_->disabled = true;
  logger().warn("train.cuda_graph: training eagerly because {}", why);
}

#endif

CudaGraphStep::~CudaGraphStep() = default;

GraphShapeAction graph_shape_action(c10::IntArrayRef captured, c10::IntArrayRef batch) {
  if (captured.equals(batch)) return GraphShapeAction::kReplay;
  if (captured.size() != batch.size() || captured.empty()) return GraphShapeAction::kRecapture;
  return captured.slice(1).equals(batch.slice(1)) ? GraphShapeAction::kEager : GraphShapeAction::kRecapture;
}

}  // namespace stoker
