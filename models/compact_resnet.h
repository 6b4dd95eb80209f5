// The compact ResNet-style network of the Fashion-MNIST recipe, and the model registry.
//
// CompactResNet: a 3x3 stem, then one stage per entry of `widths`, each of `blocks[i]` basic
// residual blocks (two 3x3 conv + batch-norm, identity or 1x1 projection shortcut); every stage
// after the first halves the resolution. Global average pooling, dropout, one linear classifier.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>

#include "common/registry.h"

namespace stoker::models {

// What a model is asked to be: its configured architecture plus the shape of the data.
struct ModelSpec {
  std::string type = "compact_resnet";
  std::vector<int64_t> widths{16, 32, 64};
  std::vector<int64_t> blocks{1, 1, 1};
  double dropout = 0.0;
  // From the data set:
  int64_t in_channels = 1;
  int64_t num_classes = 10;
};

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

// Builds a model; the result is type-erased so that the Trainer can hold any module with a
// `forward(Tensor) -> Tensor`.
using ModelFactory = std::function<torch::nn::AnyModule(const ModelSpec&)>;

// The process-wide model registry, with Stoker's own models already in it. Applications add theirs
// with `model_registry().add("my_net", factory)` and then select them with `model.type: my_net`.
Registry<ModelFactory>& model_registry();

// Looks up `spec.type` and builds it.
torch::nn::AnyModule create_model(const ModelSpec& spec);

}  // namespace stoker::models
