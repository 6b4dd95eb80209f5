// Activation checkpointing (model.activation_checkpointing): chosen blocks of a model keep no
// activations for backward; backward runs each such block's forward again, with gradients, and
// differentiates that. It trades one more forward of those blocks for their activation memory.
//
// libtorch has no torch.utils.checkpoint: checkpointed() is a custom autograd function. Its forward
// runs the block without recording a graph and saves only the input, the block's parameters being
// further inputs of the function (so the gradients of a block whose input needs none, the first one,
// still reach its parameters, through the ordinary gradient accumulation, once per backward: the data-
// parallel gradient hooks see nothing special). Its backward
//   - puts back the random generators' state the forward started from (the CPU's, and the CUDA
//     device's for an input on CUDA), so that dropout and drop path draw the same masks, and restores
//     the generators' current state afterwards;
//   - puts back the autocast state of the forward (mixed precision recomputes in the same dtypes);
//   - keeps the block's buffers as they were (BatchNorm's running statistics are updated once, by the
//     first forward, not again by the recomputation);
//   - recomputes the block and returns the gradients of its input and parameters.
// The gradients equal those of the plain forward (the same operations on the same values).
//
// How a model family makes its blocks checkpointable (one base class and one line in forward):
//   class MyBlockImpl : public torch::nn::Module, public models::CheckpointableBlock {
//     torch::Tensor forward(const torch::Tensor& x) {
//       return run_block(*this, x, [this](const torch::Tensor& x) { return body(x); });
//     }
//   };
// Its blocks are then found in module order (the model's block indices, 0-based), and
// model.activation_checkpointing: true | [indices] reaches them for every model of the family.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/types.h>

namespace stoker::models {

using BlockBody = std::function<torch::Tensor(const torch::Tensor&)>;

// `body(input)`, its activations recomputed in backward instead of kept; `owner` is the module whose
// parameters `body` uses and whose buffers the recomputation must leave as they are.
torch::Tensor checkpointed(torch::nn::Module& owner, const torch::Tensor& input, const BlockBody& body);

// The base class of a block that can be checkpointed.
class CheckpointableBlock {
 public:
  virtual ~CheckpointableBlock() = default;
  void set_checkpointing(bool on) { checkpointing_ = on; }
  bool checkpointing() const { return checkpointing_; }

 protected:
  // body(x); checkpointed when checkpointing is on, `self` trains and gradients are being recorded.
  torch::Tensor run_block(torch::nn::Module& self, const torch::Tensor& x, const BlockBody& body) const;

 private:
  bool checkpointing_ = false;
};

// model.activation_checkpointing: every block (`all`), the blocks at `indices`, or none.
struct BlockSelection {
  bool all = false;
  std::vector<int64_t> indices;
  bool any() const { return all || !indices.empty(); }
};

// The checkpointable blocks of `model`, in module order.
std::vector<CheckpointableBlock*> checkpointable_blocks(torch::nn::Module& model);

// Turns checkpointing on for the selected blocks of `model` (and off for the others); returns how
// many are checkpointed. A selection of a model without blocks, or an index beyond its blocks, is an
// error naming activation_checkpointing and `model_type`.
int64_t apply_activation_checkpointing(torch::nn::Module& model, const BlockSelection& selection,
                                       const std::string& model_type);

}  // namespace stoker::models
