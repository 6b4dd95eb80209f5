// A training step captured once as a CUDA graph and replayed (train.cuda_graph), in the manner of
// tiny-cuda-nn's CudaGraph::capture_and_execute: the Trainer hands over the *same* step function it
// runs eagerly, so a stage added to the step (gradient all-reduce, gradient statistics) is written
// once and is in the graph too.
//
// After `warmup` eager calls on a side stream (cuDNN/cuBLAS pick algorithms and workspaces,
// autograd and the optimizer create their state), one call is captured with static input and target
// buffers; every later call copies the batch into those buffers (a device-to-device copy) and
// replays the graph: one launch instead of hundreds. A batch of another shape is not replayed: one
// with fewer samples (an epoch's short last batch) is stepped eagerly (run() returns nothing); one
// whose samples have another shape (a new size from data.resolution_schedule, which changes only
// between epochs, so each size holds for an epoch or more) replaces the graph: the old one and its
// memory pool go, and the step is warmed up and captured again at the new shape (graph_shape_action).
// A capture that fails (a host synchronisation in the step, an op that cannot be captured) ends the
// stream capture, gives the graph's memory pool back to the caching allocators and disables the
// graph for good, with a warning saying why; the caller steps eagerly from then on.
//
// Replays are asynchronous: the host queues the next replay as soon as the batch is copied in, so it
// may run ahead of the GPU by as many steps as the caller lets it. The Trainer bounds that at the
// logging interval and at every non-finite check (train.log_every_steps), where it reads a flag and
// so waits for the device; between those the caching allocator's copy of each batch is what stays
// in flight.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <c10/util/ArrayRef.h>
#include <torch/types.h>

namespace stoker {

// What run() does with a batch of shape `batch` when a graph was captured at `captured`: replay it
// (the same shape), step eagerly (only the number of samples differs: a short batch, once an epoch),
// or capture again (a sample's shape differs: the run trains at a new size from now on).
enum class GraphShapeAction { kReplay, kEager, kRecapture };
GraphShapeAction graph_shape_action(c10::IntArrayRef captured, c10::IntArrayRef batch);

class CudaGraphStep {
 public:
  // The step: forward, loss, backward and the optimizer update on (input, target); returns the loss.
  using StepFunction = std::function<torch::Tensor(const torch::Tensor& input, const torch::Tensor& target)>;
  struct Hooks {
    std::function<void()> before_capture;  // e.g. drop the gradients so backward allocates them in the pool
    std::function<void()> after_failure;   // e.g. forget the loss scaler's half-done step
    // The graph is let go of (a batch of a new sample shape): e.g. drop the gradients, which hold the
    // last replay's and live in the graph's pool, so that the warm-up steps start from none.
    std::function<void()> before_release;
  };

  CudaGraphStep(torch::Device device, StepFunction step, Hooks hooks, int warmup = 3);
  ~CudaGraphStep();
  CudaGraphStep(const CudaGraphStep&) = delete;
  CudaGraphStep& operator=(const CudaGraphStep&) = delete;

  // Runs one step on the batch: a warm-up step, the capture (which also trains on this batch), or a
  // replay. Returns the detached loss, or nothing when the caller must step eagerly instead (the
  // graph is disabled, or the batch's shape is not the captured one).
  std::optional<torch::Tensor> run(const torch::Tensor& input, const torch::Tensor& target);

  // Lets go of a captured graph, so that the next calls warm up and capture the step again (what the
  // step computes changed: parameters were frozen or released). Nothing before a capture.
  void recapture();
  // Stops using the graph for good; `why` is logged once.
  void disable(const std::string& why);
  // Lets go of a captured graph (nothing when none is): the tensors it reads were replaced, e.g. the
  // optimizer state by a loaded checkpoint, so replaying it would update the old ones. The next calls
  // warm up and capture again; `why` is logged.
  void recapture(const std::string& why);
  bool disabled() const;
  // Captured: the steps are replays from now on.
  bool active() const;

 private:
  struct State;  // CUDA streams and the graph (trainer/cuda_graph_step.cpp)
  std::unique_ptr<State> state_;
};

}  // namespace stoker
