// Accelerator idle time between training steps, measured on the GPU itself with CUDA events: one
// recorded on the compute stream before a step's work is issued and one after it. The GPU reaches
// the "before" event of step i right after step i-1's work ends when the host kept ahead; when the
// host was late (waiting for a batch, or for its copy), the GPU sat idle until the event, and the
// time from step i-1's "after" event to step i's "before" event is that idle gap. Events are read
// only once they have completed (cudaEventQuery), at the logging interval: no host sync per step.
//
// What it does not see: gaps *inside* a step (the GPU waiting on a host synchronisation the step
// itself makes, or on small kernels launched one by one) count as busy time; the doctor's ladder and
// the step benchmark measure those (a CUDA graph removes most of them).
//
// On the CPU (or without Stoker's CUDA parts) the meter is inactive and measures nothing.
#pragma once

#include <memory>
#include <optional>

#include <torch/types.h>

namespace stoker {

class GpuIdleMeter {
 public:
  explicit GpuIdleMeter(torch::Device device);
  ~GpuIdleMeter();
  bool active() const { return impl_ != nullptr; }
  void step_begin();  // before the step's work is issued
  void step_end();    // after it
  // Forgets the last step, so that the pause between epochs (evaluation) is not counted as idle.
  void new_epoch();
  // The share of GPU time spent idle between steps, over the steps completed since the last call
  // (idle / (idle + busy)); nothing when no pair of steps has completed, or off CUDA.
  std::optional<double> take_idle_share();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker
