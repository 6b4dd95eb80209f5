// KeepRng: puts the default random generators back as they were when it goes away (the CPU's, and
// the CUDA device's when one is given). Work done on the side of a run (timing candidate precisions,
// counting FLOPs on a copy of the model) builds models and steps them, which draws random numbers; a
// run, resumed or not, must draw the same with that work as without it.
#pragma once

#include <optional>

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace stoker {

class KeepRng {
 public:
  explicit KeepRng(c10::Device device = c10::Device(c10::DeviceType::CPU));
  ~KeepRng();
  KeepRng(const KeepRng&) = delete;
  KeepRng& operator=(const KeepRng&) = delete;

 private:
  at::Generator cpu_;
  at::Tensor cpu_state_;
  std::optional<at::Generator> cuda_;
  at::Tensor cuda_state_;
};

}  // namespace stoker
