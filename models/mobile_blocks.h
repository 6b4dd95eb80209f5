// The building blocks EfficientNet (models/efficientnet.h) and MobileNetV3 (models/mobilenet_v3.h)
// share, with torchvision's module layout and parameter names (torchvision.ops.misc and
// torchvision.models.{efficientnet,mobilenetv3}):
// - ConvNormActivation: torchvision's Conv2dNormActivation, a convolution `0` (no bias, padding
//   (k - 1) / 2 * dilation), a batch norm `1` and an activation (no parameters, so no name);
// - SqueezeExcitation: global average pool, `fc1` (1x1 convolution), activation, `fc2`, a gate
//   (sigmoid or hard sigmoid) that scales the input's channels;
// - InvertedResidual: the MBConv / inverted residual block, `block.{0..}` = expand (when the expanded
//   width differs), depthwise, squeeze-excitation (when it has one), project (no activation), plus the
//   input where stride 1 keeps the shape, its branch dropped per sample by stochastic depth
//   (drop_path in models/blocks.h, torchvision's StochasticDepth "row");
// - make_divisible, torchvision's _make_divisible, which rounds every width to a multiple of 8;
// - the two families' initialisation and torchvision's rule for stochastic-depth rates.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>

#include "models/activation_checkpointing.h"
#include "models/batch_norm.h"

namespace stoker::models {

namespace onnx { class OnnxExport; }  // models/onnx/export.h

// The activations of these families; none has parameters.
enum class Activation { kNone, kReLU, kSiLU, kHardswish, kSigmoid, kHardsigmoid };
torch::Tensor activate(const torch::Tensor& x, Activation activation);

// Batch-norm settings: PyTorch's defaults (EfficientNet-B0..B3) or MobileNetV3's eps 0.001 and
// momentum 0.01 (torchvision's, from the TensorFlow originals).
struct NormSettings {
  double eps = 1e-5;
  double momentum = 0.1;
};

// torchvision's _make_divisible(v, divisor, min_value): v rounded to the nearest multiple of
// `divisor` (half up), at least `min_value` (the divisor when 0), and never below 90% of v.
int64_t make_divisible(double v, int64_t divisor = 8, int64_t min_value = 0);

// A ConvNormActivation's convolution, activation and batch norm.
struct ConvNormSettings {
  int64_t kernel = 3, stride = 1, groups = 1, dilation = 1;
  Activation activation = Activation::kReLU;
  NormSettings norm;
};

// Conv2d (no bias) `0`, BatchNorm2d `1` (models::BatchNorm2d: distributed.sync_batchnorm reaches it),
// then the activation.
class ConvNormActivationImpl : public torch::nn::Module {
 public:
  ConvNormActivationImpl(int64_t in, int64_t out, const ConvNormSettings& settings);
  torch::Tensor forward(const torch::Tensor& x);
  Activation activation() const { return activation_; }

 private:
  Activation activation_;
  torch::nn::Conv2d conv{nullptr};
  BatchNorm2d norm{nullptr};
};
TORCH_MODULE(ConvNormActivation);

// x * gate(fc2(activation(fc1(mean over H, W of x)))): `fc1` channels -> squeeze, `fc2` back, both
// 1x1 convolutions with bias.
class SqueezeExcitationImpl : public torch::nn::Module {
 public:
  SqueezeExcitationImpl(int64_t channels, int64_t squeeze, Activation activation, Activation gate);
  torch::Tensor forward(const torch::Tensor& x);
  Activation activation() const { return activation_; }
  Activation gate() const { return gate_; }

 private:
  Activation activation_, gate_;
  torch::nn::Conv2d fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(SqueezeExcitation);

// One inverted residual block's shape, as torchvision's MBConvConfig / InvertedResidualConfig give it
// after the width multiplier.
struct InvertedResidualSettings {
  int64_t in = 0, expanded = 0, out = 0;
  int64_t kernel = 3, stride = 1;
  Activation activation = Activation::kReLU;
  int64_t squeeze = 0;  // squeeze-excitation's inner width; 0 = no squeeze-excitation
  Activation se_activation = Activation::kReLU, se_gate = Activation::kSigmoid;
  NormSettings norm;
};

class InvertedResidualImpl : public torch::nn::Module, public CheckpointableBlock {
 public:
  explicit InvertedResidualImpl(const InvertedResidualSettings& settings);
  torch::Tensor forward(const torch::Tensor& x);
  // Whether the input is added back (stride 1 and as many channels out as in).
  bool residual() const { return residual_; }
  // The probability of dropping a training sample's branch where the block is residual; 0 = never.
  void set_drop_path(double rate) { drop_path_ = rate; }
  double drop_path_rate() const { return drop_path_; }

 private:
  bool residual_ = false;
  double drop_path_ = 0.0;
  torch::nn::Sequential block{nullptr};
};
TORCH_MODULE(InvertedResidual);

// torchvision's stochastic-depth rule for these families: block i of n (all stages counted) gets
// rate * i / n, so the first gets 0 and the last rate * (n - 1) / n.
std::vector<double> stochastic_depth_rates(double rate, int64_t blocks);

// Sets the rates of every InvertedResidual of `model`, in module order, to
// stochastic_depth_rates(rate, their count); returns the count.
int64_t apply_stochastic_depth(torch::nn::Module& model, double rate);

// The blocks' ONNX exporters (models/onnx/export.h): their eval-mode forwards (stochastic depth the
// identity); `onnx_activate` writes an Activation as nodes.
std::string onnx_activate(onnx::OnnxExport& e, const std::string& x, Activation activation);
std::string conv_norm_activation_to_onnx(onnx::OnnxExport& e, const ConvNormActivationImpl& m, const std::string& x);
std::string squeeze_excitation_to_onnx(onnx::OnnxExport& e, const SqueezeExcitationImpl& m, const std::string& x);
std::string inverted_residual_to_onnx(onnx::OnnxExport& e, const InvertedResidualImpl& m, const std::string& x);

// How a family initialises its linear layers: EfficientNet uniform in +-1/sqrt(out_features),
// MobileNetV3 normal(0, 0.01); both with zero bias.
enum class LinearInit { kUniformByOutputs, kNormal001 };

// torchvision's initialisation of both families: every convolution Kaiming-normal (fan-out, gain
// sqrt(2)) with zero bias, every batch norm weight 1 and bias 0, linear layers as `linear` says.
void init_mobile_weights(torch::nn::Module& model, LinearInit linear);

}  // namespace stoker::models
