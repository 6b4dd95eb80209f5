// Collective operations on tensors over the ranks of a run, in terms of tensors only (no c10d type
// here): what SyncBatchNorm (parallel/sync_batchnorm.h), the sharded optimizer
// (parallel/sharded_optimizer.h) and the evaluation's BatchNorm statistics (distributed.eval_bn) ask of
// the process group. distributed::ProcessGroup implements it over c10d (Gloo on the CPU, NCCL on CUDA).
//
// Every rank must call the same collectives in the same order with tensors of the same shape and
// dtype; each call returns when its result is in place (on CUDA: when it is ordered before the work
// queued after it on the current stream).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/types.h>

namespace stoker::distributed {

// Whether a collective's error message says that the connection to a peer was lost or timed out
// (process_group.cpp).
bool lost_connection(const std::string& message);

enum class ReduceOp { kSum, kMax };

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int64_t rank() const = 0;
  virtual int64_t world_size() const = 0;
  // In place: each tensor becomes the element-wise sum (or maximum) of every rank's.
  virtual void all_reduce(std::vector<torch::Tensor> tensors, ReduceOp op = ReduceOp::kSum) = 0;
  // Every rank's `input` (the same shape on all ranks), stacked in rank order: [world_size, ...].
  virtual torch::Tensor all_gather(const torch::Tensor& input) = 0;
  // Rank 0's values into every rank's tensors, in place.
  virtual void broadcast(std::vector<torch::Tensor> tensors) = 0;
};

}  // namespace stoker::distributed
