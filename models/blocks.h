// The residual blocks every Stoker ResNet is built from: one BasicBlock (the compact ResNet, the
// CIFAR ResNets and torchvision's ResNet-18/34 all use it) and torchvision's Bottleneck
// (ResNet-50/101).
//
// Each block builds its own shortcut, as torchvision's ResNet.make_layer decides it: the identity
// where the input already has the output's shape, otherwise a projection (1x1 convolution with the
// block's stride + batch-norm, the ResNet paper's "option B"). Module names are torchvision's
// (`conv1`, `bn1`, `conv2`, `bn2`, `downsample.0`, `downsample.1`), so state dicts move between
// Stoker and Python; a caller may name the shortcut otherwise (the compact ResNet keeps its
// historical `shortcut`). The blocks leave initialisation to the network (init_resnet_weights in
// models/resnet.h for the torchvision-style ones, libtorch's defaults for the compact ResNet). Their
// batch norms are models::BatchNorm2d (distributed.sync_batchnorm reaches them), and each block is a
// CheckpointableBlock (model.activation_checkpointing).
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

// Stochastic depth (Huang et al. 2016; timm's drop_path, torchvision's StochasticDepth "row"): in
// training, each sample's residual branch is dropped with probability `rate` and the kept ones are
// scaled by 1 / (1 - rate); at evaluation (or rate 0) the branch as it is. Draws from the default
// generator of `x`'s device (as dropout does; the checkpoints keep its state).
torch::Tensor drop_path(const torch::Tensor& x, double rate, bool training);

// The per-block rates of stochastic depth for `blocks` residual blocks: linear from 0 (the first)
// to `rate` (the last), timm's `drop_path_rate * i / (blocks - 1)`; one block gets `rate`.
std::vector<double> drop_path_rates(double rate, int64_t blocks);

// Sets the rates of every BasicBlock and Bottleneck of `model`, in module order, to
// drop_path_rates(rate, their count); returns the count. Parameters and buffers do not change.
int64_t apply_drop_path(torch::nn::Module& model, double rate);

// A 3x3 convolution, padding 1, no bias (torchvision's conv3x3).
torch::nn::Conv2d conv3x3(int64_t in, int64_t out, int64_t stride);
// A 1x1 convolution, no bias (torchvision's conv1x1).
torch::nn::Conv2d conv1x1(int64_t in, int64_t out, int64_t stride);

// conv3x3(stride) - bn - relu - conv3x3 - bn, plus the shortcut, then relu.
class BasicBlockImpl : public torch::nn::Module, public CheckpointableBlock {
 public:
  static constexpr int64_t expansion = 1;
  // `shortcut_name` names the projection shortcut's submodule when there is one.
  BasicBlockImpl(int64_t inplanes, int64_t planes, int64_t stride,
                 const std::string& shortcut_name = "downsample");
  torch::Tensor forward(const torch::Tensor& x);
  // The probability of dropping the residual branch of a training sample (drop_path); 0 = never.
  void set_drop_path(double rate) { drop_path_ = rate; }
  double drop_path_rate() const { return drop_path_; }
  // The name of the projection shortcut's submodule ("downsample", or the compact ResNet's
  // "shortcut"); it has none when the shortcut is the identity.
  const std::string& shortcut_name() const { return shortcut_name_; }

 private:
  torch::Tensor body(const torch::Tensor& x);
  double drop_path_ = 0.0;
  std::string shortcut_name_;
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  BatchNorm2d bn1{nullptr}, bn2{nullptr};
  torch::nn::Sequential shortcut{nullptr};  // empty for the identity
};
TORCH_MODULE(BasicBlock);

// torchvision's Bottleneck, v1.5 (the stride on the 3x3 convolution): conv1x1 - bn - relu -
// conv3x3(stride) - bn - relu - conv1x1 (planes * 4) - bn, plus the shortcut, then relu.
class BottleneckImpl : public torch::nn::Module, public CheckpointableBlock {
 public:
  static constexpr int64_t expansion = 4;
  BottleneckImpl(int64_t inplanes, int64_t planes, int64_t stride);
  torch::Tensor forward(const torch::Tensor& x);
  void set_drop_path(double rate) { drop_path_ = rate; }  // as BasicBlock's
  double drop_path_rate() const { return drop_path_; }

 private:
  torch::Tensor body(const torch::Tensor& x);
  double drop_path_ = 0.0;
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  BatchNorm2d bn1{nullptr}, bn2{nullptr}, bn3{nullptr};
  torch::nn::Sequential downsample{nullptr};  // empty for the identity
};
TORCH_MODULE(Bottleneck);

// The blocks' ONNX exporters (models/onnx/export.h): their eval-mode forwards, in which stochastic
// depth is the identity.
std::string basic_block_to_onnx(onnx::OnnxExport& e, const BasicBlockImpl& block, const std::string& x);
std::string bottleneck_to_onnx(onnx::OnnxExport& e, const BottleneckImpl& block, const std::string& x);

}  // namespace stoker::models
