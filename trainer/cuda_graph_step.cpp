#include "trainer/cuda_graph_step.h"

#include <torch/torch.h>

#include "common/error.h"
#include "trainer/logging.h"
#include "trainer/precision.h"

#ifdef STOKER_WITH_CUDA
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/cuda/CUDAEvent.h>
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

// at::cuda::CUDAGraph with a look at whether its capture ended (its destructor gives the memory
// pool back only then).
struct Graph : at::cuda::CUDAGraph {
  bool capture_ended() const { return capture_ended_; }
};

// Makes `then` wait for the work queued so far on `first`.
void order(const at::cuda::CUDAStream& first, const at::cuda::CUDAStream& then) {
  at::cuda::CUDAEvent event;
  event.record(first);
  event.block(then);
}

// Calls `f`, logging instead of throwing: clean-up after a failure must not fail itself.
template <typename F>
void quietly(const char* what, F f) {
  try {
    f();
  } catch (const std::exception& e) {
    logger().debug("train.cuda_graph: {} after the failed capture: {}", what, e.what());
  }
}

}  // namespace

struct CudaGraphStep::State {
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
};

// Captures the step on static copies of the batch. The capture records the work without doing it,
// so the caller replays the graph once afterwards to train on this batch.
void CudaGraphStep::State::capture(const torch::Tensor& in, const torch::Tensor& tgt) {
  input = in.clone();
  target = tgt.clone();
  if (hooks.before_capture) hooks.before_capture();
  c10::cuda::device_synchronize();
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
// private memory pool back: CUDAGraph::capture_begin made the caching allocators (device and pinned
// host) allocate into that pool, and only capture_end stops that. Left as it was, every block freed
// afterwards would stay reserved for the dead graph and the eager fallback would run out of memory.
void CudaGraphStep::State::undo_failed_capture(bool began) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(side->stream(), &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
    cudaGraph_t broken = nullptr;
    cudaStreamEndCapture(side->stream(), &broken);
    if (broken != nullptr) cudaGraphDestroy(broken);
  }
  (void)cudaGetLastError();
  if (began && graph && !graph->capture_ended()) {
    const c10::DeviceIndex index = device.index();
    const c10::MempoolId_t pool = graph->pool();
    quietly("ending the device pool", [&] { c10::cuda::CUDACachingAllocator::endAllocateToPool(index, pool); });
    quietly("releasing the device pool", [&] { c10::cuda::CUDACachingAllocator::releasePool(index, pool); });
    quietly("ending the host pool", [&] { at::getHostAllocator(at::kCUDA)->end_allocate_to_pool(pool); });
    quietly("releasing the host pool", [&] { at::getHostAllocator(at::kCUDA)->release_pool(pool); });
  }
  graph.reset();
  input = target = loss = torch::Tensor();
}

CudaGraphStep::CudaGraphStep(torch::Device device, StepFunction step, Hooks hooks, int warmup)
    : state_(std::make_unique<State>(State{device, std::move(step), std::move(hooks), warmup})) {
  if (!device.is_cuda()) disable("it needs a CUDA device");
}

std::optional<torch::Tensor> CudaGraphStep::run(const torch::Tensor& input, const torch::Tensor& target) {
  State& s = *state_;
  if (s.disabled) return std::nullopt;
  if (s.graph && !input.sizes().equals(s.input.sizes())) return std::nullopt;  // another shape: eager
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
      std::string why = e.what();
      disable(fmt::format("the training step could not be captured ({})", why.substr(0, why.find('\n'))));
      if (s.hooks.after_failure) s.hooks.after_failure();
      return std::nullopt;
    }
    logger().info("train.cuda_graph: captured the training step; replaying it from now on");
  }
  s.input.copy_(input, /*non_blocking=*/true);
  s.target.copy_(target, /*non_blocking=*/true);
  s.graph->replay();
  return s.loss.detach().clone();
}

bool CudaGraphStep::active() const { return state_->graph != nullptr && !state_->disabled; }
bool CudaGraphStep::disabled() const { return state_->disabled; }

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
bool CudaGraphStep::active() const { return false; }
bool CudaGraphStep::disabled() const { return state_->disabled; }

void CudaGraphStep::disable(const std::string& why) {
  if (state_->disabled) return;
  state_->disabled = true;
  logger().warn("train.cuda_graph: training eagerly because {}", why);
}

#endif

CudaGraphStep::~CudaGraphStep() = default;

}  // namespace stoker
