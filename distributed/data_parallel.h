// What data-parallel training asks of the process group, in terms of tensors only (no c10d type in
// this header, so that the Trainer and the installed headers do not need c10d's or gloo's).
//
// The Trainer calls before_backward(sync) before every backward and after_backward(sync) after it
// (trainer/trainer.cpp, step_function): sync = this micro-batch ends an optimizer step: the gradient
// all-reduce is armed (c10d::Reducer: buckets are all-reduced as backward fills them, and when
// backward returns the gradients are the mean over all ranks; after_backward has nothing left to do);
// sync = false (an accumulation micro-step): the gradients stay local.
// And, outside the step, sum() for sharded evaluation and broadcast() for buffers (BatchNorm's
// running statistics) from rank 0. distributed::ProcessGroup::data_parallel (distributed/process_group.h) makes one.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/types.h>

namespace stoker::distributed {

class DataParallel {
 public:
  virtual ~DataParallel() = default;
  virtual int64_t rank() const = 0;
  virtual int64_t world_size() const = 0;
  virtual void before_backward(bool sync) = 0;
  virtual void after_backward(bool /*sync*/) {}
  // Element-wise sums over all ranks, in place (float64 on the host).
  virtual void sum(std::vector<double>& values) = 0;
  // Rank 0's values into every rank's tensors, in place.
  virtual void broadcast(std::vector<torch::Tensor> tensors) = 0;
};

}  // namespace stoker::distributed
