// torchvision-compatible MobileNetV3-Small and -Large (Howard et al. 2019;
// torchvision.models.mobilenetv3), width multiplier 1.0.
//
// Module for module torchvision's layout, so that state dicts move both ways with
// load_state_dict(strict=True): `features.0` the stem (3x3 stride-2 ConvNormActivation, hard swish),
// `features.1`..`features.N` one InvertedResidual each (`features.i.block.{0..}`: expand 1x1 where
// the expanded width differs, depthwise k x k, SqueezeExcitation `fc1`/`fc2` (ReLU, hard-sigmoid
// gate; squeeze width make_divisible(expanded / 4)) where the table says so, project 1x1; ReLU or
// hard swish per the table; models/mobile_blocks.h), `features.N+1` the 1x1 head convolution to 6x
// the last block's width (hard swish), average pooling, and the classifier `classifier.0` (Linear to
// 1024 / 1280), hard swish, `classifier.2` (Dropout), `classifier.3` (Linear). Batch norm with
// torchvision's eps 0.001 and momentum 0.01.
//
// Registered as mobilenet_v3_small and mobilenet_v3_large with the keys of MobileNetV3Options.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>

#include "common/options.h"
#include "models/layer_groups.h"
#include "models/shape.h"

namespace stoker::models {

// The own keys of the MobileNetV3 types: model.dropout before the last linear layer (torchvision's
// 0.2) and model.drop_path_rate, stochastic depth on the residual blocks as EfficientNet's (block i
// of n drops with rate * i / n; timm's MobileNetV3 has it, torchvision's has none: default 0).
// model.bn_eps: the batch norms' eps, torchvision's 0.001 (timm's MobileNetV3 weights were trained with
// 1e-5: model.pretrained refuses them until it is set so).
struct MobileNetV3Options : TypeOptionsOf<MobileNetV3Options> {
  double dropout = 0.2;
  double drop_path_rate = 0.0;
  double bn_eps = 0.001;
  void visit(OptionsVisitor& v) override;
};

enum class MobileNetV3Size { kSmall, kLarge };

class MobileNetV3Impl : public torch::nn::Module {
 public:
  MobileNetV3Impl(MobileNetV3Size size, const MobileNetV3Options& options, const ModelShape& shape);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::nn::Sequential features{nullptr}, classifier{nullptr};
};
TORCH_MODULE(MobileNetV3);

MobileNetV3 mobilenet_v3_small(int64_t num_classes = 1000, int64_t in_channels = 3);

namespace onnx { class OnnxExport; }  // models/onnx/export.h
// The ONNX exporter of MobileNetV3 (models/onnx/export.h): its eval-mode forward.
std::string mobilenet_v3_to_onnx(onnx::OnnxExport& e, const MobileNetV3Impl& net, const std::string& x);
MobileNetV3 mobilenet_v3_large(int64_t num_classes = 1000, int64_t in_channels = 3);

// The layers of a torchvision-layout MobileNetV3 for optimizer.layer_decay, as timm's
// MobileNetV3.group_matcher groups its blocks: the stem (features.0), each inverted residual block and
// the last convolution (features.<i>), then the classifier.
std::vector<LayerGroup> mobilenet_v3_layer_groups();

}  // namespace stoker::models
