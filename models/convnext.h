// torchvision-compatible ConvNeXt (Liu et al. 2022): convnext_tiny, convnext_small, convnext_base and a
// configurable `convnext`.
//
// The architecture is torchvision.models.convnext's, module for module: `features.0` the stem (a 4x4
// stride-4 convolution with bias, `features.0.0`, and a LayerNorm2d, `features.0.1`); `features.1`,
// `.3`, `.5`, `.7` the stages of CNBlocks (`block.0` depthwise 7x7 convolution, permute to channels
// last, `block.2` LayerNorm, `block.3` Linear to 4x the width, GELU, `block.5` Linear back, permute,
// times `layer_scale`, stochastic depth, plus the input); `features.2`, `.4`, `.6` the downsampling
// between stages (LayerNorm2d `.0`, 2x2 stride-2 convolution `.1`); average pooling; `classifier.0`
// LayerNorm2d, flatten, `classifier.2` Linear. State-dict keys equal torchvision's, so weights move
// both ways (models/weights/state_dict.h). Initialisation as torchvision's: truncated normal (std 0.02) for
// every convolution and linear layer, zero biases, layer_scale 1e-6.
//
// Stochastic depth (model.drop_path_rate) rises linearly over all blocks from 0 to the rate, as
// torchvision's stochastic_depth_prob (whose builders default to 0.1 / 0.4 / 0.5 for tiny / small /
// base; Stoker's default is 0, as timm's, for every model).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/options.h"
#include "models/activation_checkpointing.h"
#include "models/layer_groups.h"
#include "models/shape.h"

namespace stoker::models {

// Everything a ConvNeXt is built from.
struct ConvNextConfig {
  std::string name = "convnext";                 // the model.type, for messages
  std::vector<int64_t> widths{96, 192, 384, 768};  // channels of each stage
  std::vector<int64_t> depths{3, 3, 9, 3};         // CNBlocks in each stage
  double layer_scale = 1e-6;                       // the initial value of every block's layer_scale
  double drop_path_rate = 0.0;                     // stochastic depth, 0 to this over the blocks
};

// torchvision's named configurations: convnext_tiny, convnext_small, convnext_base (nullopt otherwise).
std::optional<ConvNextConfig> named_convnext(const std::string& name);

// The keys of convnext_tiny / small / base (their architecture is fixed): model.drop_path_rate,
// model.layer_scale.
struct ConvNextOptions : TypeOptionsOf<ConvNextOptions> {
  ConvNextConfig config;
  void visit(OptionsVisitor& v) override;
};

// The configurable `convnext`'s keys: those above and model.widths, model.depths (one entry per stage);
// by default widths 32/64/128/256 with 1/1/3/1 blocks, small enough to train on a CPU.
struct ConvNextCustomOptions : TypeOptionsOf<ConvNextCustomOptions> {
  ConvNextConfig config{"convnext", {32, 64, 128, 256}, {1, 1, 3, 1}};
  void visit(OptionsVisitor& v) override;
  void check() const override;
};

namespace onnx { class OnnxExport; }  // models/onnx/export.h

// torchvision's LayerNorm2d: LayerNorm over the channels of an [N, C, H, W] tensor (eps 1e-6), through a
// permute to channels-last and back; parameters `weight`, `bias`.
class LayerNorm2dImpl : public torch::nn::Module {
 public:
  explicit LayerNorm2dImpl(int64_t channels, double eps = 1e-6);
  torch::Tensor forward(const torch::Tensor& x);
  double eps() const { return eps_; }

  torch::Tensor weight, bias;

 private:
  double eps_;
};
TORCH_MODULE(LayerNorm2d);

// torchvision's CNBlock (see the top of this file).
class CNBlockImpl : public torch::nn::Module, public CheckpointableBlock {
 public:
  CNBlockImpl(int64_t dim, double layer_scale, double drop_path_rate);
  torch::Tensor forward(const torch::Tensor& x);
  double drop_path_rate() const { return drop_path_; }

  torch::Tensor layer_scale;

 private:
  double drop_path_;
  torch::nn::Sequential block{nullptr};
  torch::nn::Conv2d dwconv{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(CNBlock);

class ConvNextImpl : public torch::nn::Module {
 public:
  // An error naming config.name when the input (where shape knows it) is too small for the stages.
  ConvNextImpl(const ConvNextConfig& config, const ModelShape& shape);
  torch::Tensor forward(const torch::Tensor& x);  // [N, C, H, W] -> [N, num_classes]

  const ConvNextConfig& config() const { return config_; }

 private:
  ConvNextConfig config_;
  torch::nn::ModuleList features{nullptr};  // (a Sequential cannot hold the stages' Sequentials)
  torch::nn::Sequential classifier{nullptr};
  torch::nn::Conv2d stem_conv{nullptr};
  LayerNorm2d stem_norm{nullptr}, head_norm{nullptr};
  std::vector<std::vector<CNBlock>> stages_;
  std::vector<std::pair<LayerNorm2d, torch::nn::Conv2d>> downsamples_;
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(ConvNext);

// The ONNX exporters of the ConvNeXt modules (models/onnx/export.h): their eval-mode forwards.
std::string layer_norm2d_to_onnx(onnx::OnnxExport& e, const LayerNorm2dImpl& norm, const std::string& x);
std::string cn_block_to_onnx(onnx::OnnxExport& e, const CNBlockImpl& block, const std::string& x);
std::string convnext_to_onnx(onnx::OnnxExport& e, const ConvNextImpl& net, const std::string& x);

// The layers of a torchvision-layout ConvNeXt for optimizer.layer_decay: timm's ConvNeXt.group_matcher
// in torchvision's names: the stem (features.0), each block (features.<2s+1>.<j>), a stage's
// downsampling (features.<2s>) with the stage's first block; then the head (classifier).
std::vector<LayerGroup> convnext_layer_groups();

}  // namespace stoker::models
