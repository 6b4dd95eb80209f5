// torchvision-compatible EfficientNet-B0..B3 (Tan & Le 2019; torchvision.models.efficientnet).
//
// Module for module torchvision's layout, so that state dicts move both ways with
// load_state_dict(strict=True) (models/weights/state_dict.h): `features.0` the stem (3x3 stride-2
// ConvNormActivation, SiLU), `features.1`..`features.7` the seven stages of MBConv blocks
// (`features.S.B.block.{0..}`: expand 1x1 where the expansion ratio is not 1, depthwise k x k,
// SqueezeExcitation `fc1`/`fc2` (SiLU, sigmoid gate), project 1x1; models/mobile_blocks.h),
// `features.8` the 1x1 head convolution to 4x the last stage's width, average pooling, and
// `classifier.1` (Linear) after `classifier.0` (Dropout). Widths and depths follow
// torchvision's _efficientnet_conf: B0's table scaled by a width multiplier (channels rounded to
// multiples of 8) and a depth multiplier (blocks rounded up), B1 (1.0, 1.1), B2 (1.1, 1.2),
// B3 (1.2, 1.4). Batch norm is PyTorch's default (eps 1e-5, momentum 0.1), as torchvision's B0-B3
// (B4 and up, and EfficientNetV2, use eps 1e-3). Stochastic depth on the residual blocks with
// torchvision's rule (block i of n drops with drop_path_rate * i / n).
//
// Registered as efficientnet_b0..efficientnet_b3 with the keys of EfficientNetOptions; the data's
// shape gives the stem's input channels and the classifier's classes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>

#include "common/options.h"
#include "models/layer_groups.h"
#include "models/shape.h"

namespace stoker::models {

// The own keys of the EfficientNet types: model.drop_path_rate (torchvision's stochastic_depth_prob,
// default 0.2) and model.dropout before the classifier (default per type: 0.2 for B0/B1, 0.3 for
// B2/B3, as torchvision's).
struct EfficientNetOptions : TypeOptionsOf<EfficientNetOptions> {
  double drop_path_rate = 0.2;
  double dropout = 0.2;
  void visit(OptionsVisitor& v) override;
};

// One variant's scaling, as torchvision's efficientnet_bN passes it to _efficientnet_conf.
struct EfficientNetVariant {
  std::string name;
  double width_mult = 1.0, depth_mult = 1.0;
  double dropout = 0.2;  // torchvision's default for the variant
};
// B0..B3 in order; an Error naming the known ones for any other name.
const EfficientNetVariant& efficientnet_variant(const std::string& name);

class EfficientNetImpl : public torch::nn::Module {
 public:
  EfficientNetImpl(const EfficientNetVariant& variant, const EfficientNetOptions& options, const ModelShape& shape);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::nn::ModuleList features{nullptr};  // the stem, the stages, the head (a Sequential cannot hold Sequentials)
  std::vector<std::function<torch::Tensor(const torch::Tensor&)>> forward_features_;  // features' entries, in order
  torch::nn::Sequential classifier{nullptr};
};
TORCH_MODULE(EfficientNet);

// efficientnet_variant(name)'s network with torchvision's defaults (drop path 0.2, the variant's dropout).
EfficientNet efficientnet(const std::string& name, int64_t num_classes = 1000, int64_t in_channels = 3);

namespace onnx { class OnnxExport; }  // models/onnx/export.h
// The ONNX exporter of EfficientNet (models/onnx/export.h): its eval-mode forward.
std::string efficientnet_to_onnx(onnx::OnnxExport& e, const EfficientNetImpl& net, const std::string& x);

// The layers of a torchvision-layout EfficientNet for optimizer.layer_decay: timm's
// EfficientNet.group_matcher in torchvision's names: the stem (features.0), each MBConv block
// (features.<stage>.<j>), the head convolution (features.8) with the last block; then the classifier.
std::vector<LayerGroup> efficientnet_layer_groups();

}  // namespace stoker::models
