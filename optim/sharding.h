// What ZeRO-1 (distributed.shard_optimizer; parallel/sharded_optimizer.h) asks of an optimizer. It is
// built over each rank's pieces of the parameters (1-D slices of their memory, at most one per
// parameter) and keeps state for those alone; for checkpoints, each piece's state is gathered into
// the whole parameter's, and cut out of it again on resume, through the methods below. SGD and AdamW
// update each element on its own and need nothing more; LAMB's trust ratio and its global gradient
// clipping take norms over whole parameters, which set_shards tells it how to total over the ranks.
#pragma once

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include <torch/types.h>

namespace stoker {

struct ParameterShards {
  // The whole parameter (an index in [0, parameters)) each of the optimizer's parameters is a piece of.
  std::unordered_map<const c10::TensorImpl*, int64_t> whole;
  int64_t parameters = 0;
  // Sums a tensor over the ranks, in place (every rank calls it at the same point of its step).
  std::function<void(torch::Tensor&)> sum_over_ranks;
  // Where the pieces live, and so what sum_over_ranks takes (NCCL: CUDA tensors), also on a rank
  // that holds no piece at all.
  torch::Device device = torch::kCPU;
};

class ShardableOptimizer {
 public:
  virtual ~ShardableOptimizer() = default;
  // The per-parameter state of `p`, tensors shaped like p in a fixed order, made (as zeros) if p has
  // none yet: SGD's momentum buffer (none without momentum), AdamW's and LAMB's exp_avg and exp_avg_sq.
  virtual std::vector<torch::Tensor> param_state(const torch::Tensor& p) = 0;
  // The steps `p` has taken (AdamW, LAMB; 0 for SGD).
  virtual int64_t param_steps(const torch::Tensor& p) = 0;
  // Sets p's state (tensors in param_state's order and shapes) and its steps.
  virtual void set_param_state(const torch::Tensor& p, const std::vector<torch::Tensor>& state, int64_t steps) = 0;
  // The parameters are pieces of larger ones, on several ranks.
  virtual void set_shards(ParameterShards /*shards*/) {}
};

}  // namespace stoker
