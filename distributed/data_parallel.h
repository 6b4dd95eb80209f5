// What data-parallel training asks of the process group, in terms of tensors only (no c10d type in
// this header, so that the Trainer and the installed headers do not need c10d's or gloo's).
//
// The Trainer calls before_backward(sync) before every backward and after_backward(sync) after it
// (trainer/trainer.cpp, step_function): sync = this micro-batch ends an optimizer step: the gradient
// all-reduce is armed (c10d::Reducer: buckets are all-reduced as backward fills them, and when
// backward returns the gradients are the mean over all ranks; after_backward has nothing left to do);
// sync = false (an accumulation micro-step): the gradients stay local.
// And, outside the step, sum() for sharded evaluation, broadcast() for buffers (BatchNorm's running
// statistics) from rank 0, and the tensor collectives (distributed/collectives.h).
// distributed::ProcessGroup::data_parallel (distributed/process_group.h) makes one;
// ProcessGroup::sharded_data_parallel the ZeRO-1 kind (ShardedDataParallel below).
#pragma once

#include <cstdint>
#include <vector>

#include <torch/types.h>

#include "distributed/collectives.h"

namespace stoker::distributed {

class DataParallel : public Collectives {
 public:
  virtual void before_backward(bool sync) = 0;
  virtual void after_backward(bool /*sync*/) {}
  // Element-wise sums over all ranks, in place (float64 on the host).
  virtual void sum(std::vector<double>& values) = 0;
};

// ZeRO-1 (distributed.shard_optimizer: true). The trainable parameters are laid out in flat buckets
// (in reverse order of definition, as the gradients become ready; the parameters and their gradients
// become views into them) and each rank owns a contiguous 1/N of every bucket. Its piece of a
// parameter is the part of that parameter inside its share (none, a slice, or all of it).
//
// A synchronised backward reduce-scatters each bucket's gradients as soon as backward has filled it
// (overlapped with the rest of backward, as the Reducer all-reduces); when after_backward(true)
// returns, each piece's grad() holds the mean over the ranks of that part of the gradient (the rest of
// each parameter's gradient holds this rank's own, unreduced: only the pieces are to be read).
// The optimizer updates the pieces alone, so it keeps state for 1/N of the parameters; then
// gather_parameters() all-gathers every rank's updated pieces into every rank's parameters.
class ShardedDataParallel : public DataParallel {
 public:
  struct Piece {
    int64_t parameter = 0;  // index into parameters()
    int64_t offset = 0;     // where the piece starts in the parameter's memory, in elements
    torch::Tensor tensor;   // 1-D view of that memory; tensor.grad() the piece's gradient
  };
  // The trainable parameters, in the model's order.
  virtual const std::vector<torch::Tensor>& parameters() const = 0;
  // This rank's pieces, in bucket order (at most one per parameter).
  virtual const std::vector<Piece>& pieces() const = 0;
  // Every rank's pieces into every rank's parameters (after the optimizer step).
  virtual void gather_parameters() = 0;
  // Zeroes the gradients in place (they stay views into the buckets).
  virtual void zero_grad() = 0;
  // For checkpoints: `values[i]` is a tensor of pieces()[i]'s size on every rank (state the optimizer
  // keeps for that piece; undefined: zeros). Returns on rank 0 each parameter's whole tensor, in the
  // parameter's shape and memory layout, put together from every rank's pieces; nothing elsewhere.
  virtual std::vector<torch::Tensor> gather_to_rank0(const std::vector<torch::Tensor>& values) = 0;
};

// The 1-D view, in memory order, of a tensor whose elements fill its memory without gaps or overlaps
// (a parameter, contiguous or channels-last).
torch::Tensor memory_view(const torch::Tensor& t);

}  // namespace stoker::distributed
