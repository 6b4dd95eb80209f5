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

#include <cstdint>
#include <string>
#include <vector>

#include "common/options.h"
#include "models/layer_groups.h"
#include "models/shape.h"

namespace stoker::models {

namespace onnx { class OnnxExport; }  // models/onnx/export.h

// compact_resnet's own keys (model.widths, model.blocks, model.dropout, model.drop_path_rate).
struct CompactResNetOptions : TypeOptionsOf<CompactResNetOptions> {
  std::vector<int64_t> widths{16, 32, 64};  // channels of each stage
  std::vector<int64_t> blocks{1, 1, 1};     // basic blocks in each stage
  double dropout = 0.0;                     // before the classifier
  double drop_path_rate = 0.0;              // stochastic depth, 0 to this over the blocks (blocks.h)
  void visit(OptionsVisitor& v) override;
  void check() const override;
};

// compact_resnet with these options, as the model registry builds it (for code and tests).
TypedOptions compact_resnet(std::vector<int64_t> widths, std::vector<int64_t> blocks, double dropout = 0.0);

// compact_resnet's layers for optimizer.layer_decay, in the manner of the ResNets': the stem
// (features.stem_*), each block features.stage<s>_block<b>, then the classifier.
std::vector<LayerGroup> compact_resnet_layer_groups();

class CompactResNetImpl : public torch::nn::Module {
 public:
  CompactResNetImpl(const CompactResNetOptions& options, const ModelShape& shape);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::nn::Sequential features{nullptr};
  torch::nn::Dropout dropout{nullptr};
  torch::nn::Linear classifier{nullptr};
};
TORCH_MODULE(CompactResNet);

// The compact ResNet's ONNX exporter (models/onnx/export.h): features, dropout (the identity), classifier.
std::string compact_resnet_to_onnx(onnx::OnnxExport& e, const CompactResNetImpl& net, const std::string& x);

}  // namespace stoker::models
