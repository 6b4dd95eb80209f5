#include "trainer/gpu_idle.h"

#include <algorithm>
#include <deque>
#include <vector>

#ifdef STOKER_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace stoker {

#ifdef STOKER_WITH_CUDA
struct GpuIdleMeter::Impl {
  struct Step {
    at::cuda::CUDAEvent begin{cudaEventDefault}, end{cudaEventDefault};
  };
  c10::DeviceIndex device;
  std::deque<std::unique_ptr<Step>> steps;  // issued, not yet read (the last read one first)
  std::vector<std::unique_ptr<Step>> spare;  // read, their events reused by later steps
  bool have_previous = false;               // steps.front() is the last step already read
  double idle_ms = 0, busy_ms = 0;

  // Reads the completed steps in order, keeping the last one for the next gap.
  void read_completed() {
    while (!steps.empty()) {
      const size_t first_unread = have_previous ? 1 : 0;
      if (steps.size() <= first_unread) return;
      Step& next = *steps[first_unread];
      if (!next.end.query()) return;
      busy_ms += next.begin.elapsed_time(next.end);
      if (have_previous) {
        idle_ms += std::max(0.0f, steps.front()->end.elapsed_time(next.begin));
        spare.push_back(std::move(steps.front()));
        steps.pop_front();
      }
      have_previous = true;
    }
  }
};

GpuIdleMeter::GpuIdleMeter(torch::Device device) {
  if (!device.is_cuda()) return;
  impl_ = std::make_unique<Impl>();
  impl_->device = device.index();
}

void GpuIdleMeter::step_begin() {
  if (!impl_) return;
  // Events are created once and re-recorded: no allocation per step once the window is warm.
  if (impl_->spare.empty()) {
    impl_->steps.push_back(std::make_unique<Impl::Step>());
  } else {
    impl_->steps.push_back(std::move(impl_->spare.back()));
    impl_->spare.pop_back();
  }
  impl_->steps.back()->begin.record(c10::cuda::getCurrentCUDAStream(impl_->device));
}

void GpuIdleMeter::step_end() {
  if (!impl_ || impl_->steps.empty()) return;
  impl_->steps.back()->end.record(c10::cuda::getCurrentCUDAStream(impl_->device));
  // Bound the events in flight: a host far ahead of the GPU reads (and so waits for) the oldest.
  if (impl_->steps.size() > 64) {
    impl_->steps[impl_->have_previous ? 1 : 0]->end.synchronize();
    impl_->read_completed();
  }
}

void GpuIdleMeter::new_epoch() {
  if (!impl_) return;
  impl_->read_completed();
  // The unread steps' events are re-recorded later (re-recording a pending event is allowed).
  for (auto& step : impl_->steps) impl_->spare.push_back(std::move(step));
  impl_->steps.clear();
  impl_->have_previous = false;
}

std::optional<double> GpuIdleMeter::take_idle_share() {
  if (!impl_) return std::nullopt;
  impl_->read_completed();
  const double total = impl_->idle_ms + impl_->busy_ms;
  if (total <= 0) return std::nullopt;
  const double share = impl_->idle_ms / total;
  impl_->idle_ms = impl_->busy_ms = 0;
  return share;
}
#else
struct GpuIdleMeter::Impl {};
GpuIdleMeter::GpuIdleMeter(torch::Device) {}
void GpuIdleMeter::step_begin() {}
void GpuIdleMeter::step_end() {}
void GpuIdleMeter::new_epoch() {}
std::optional<double> GpuIdleMeter::take_idle_share() { return std::nullopt; }
#endif

GpuIdleMeter::~GpuIdleMeter() = default;

}  // namespace stoker
