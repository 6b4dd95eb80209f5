// The compact ResNet-style network of the Fashion-MNIST recipe.
//
// CompactResNet: a 3x3 stem, then one stage per entry of `widths`, each of `blocks[i]` basic
// residual blocks (two 3x3 conv + batch-norm, identity or 1x1 projection shortcut); every stage
// after the first halves the resolution. Global average pooling, dropout, one linear classifier.
// Registered in the model registry (models/registry.h) as compact_resnet.
#pragma once

#include <cstdint>

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>

#include "models/registry.h"

namespace stoker::models {

class BasicBlockImpl : public torch::nn::Module {
 public:
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  torch::nn::Sequential shortcut{nullptr};  // empty when the shapes already match
};
TORCH_MODULE(BasicBlock);

class CompactResNetImpl : public torch::nn::Module {
 public:
  explicit CompactResNetImpl(const ModelSpec& spec);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::nn::Sequential features{nullptr};
  torch::nn::Dropout dropout{nullptr};
  torch::nn::Linear classifier{nullptr};
};
TORCH_MODULE(CompactResNet);

}  // namespace stoker::models
