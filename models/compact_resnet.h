// The compact ResNet-style network of the Fashion-MNIST recipe.
//
// CompactResNet: a 3x3 stem, then one stage per entry of `widths`, each of `blocks[i]` basic
// residual blocks (models::BasicBlock of models/blocks.h: two 3x3 conv + batch-norm, identity or
// 1x1 projection shortcut); every stage after the first halves the resolution. Global average
// pooling, dropout, one linear classifier. Registered in the model registry (models/registry.h)
// as compact_resnet. Parameter names, kept from before the blocks were shared so that saved
// checkpoints still load: `features.stem_conv`, `features.stage<s>_block<b>.{conv1,bn1,conv2,bn2}`,
// the projection `features.stage<s>_block<b>.shortcut.{0,1}`, `classifier`. Libtorch's default
// initialisation.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>

#include "models/registry.h"

namespace stoker::models {

class CompactResNetImpl : public torch::nn::Module {
 public:
  // Uses spec.widths, spec.blocks, spec.dropout, spec.in_channels and spec.num_classes.
  explicit CompactResNetImpl(const ModelSpec& spec);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::nn::Sequential features{nullptr};
  torch::nn::Dropout dropout{nullptr};
  torch::nn::Linear classifier{nullptr};
};
TORCH_MODULE(CompactResNet);

}  // namespace stoker::models
