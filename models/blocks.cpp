// The residual blocks (models/blocks.h).
#include "models/blocks.h"

#include <functional>

#include <torch/torch.h>

#include "models/onnx/export.h"
#include "models/registry.h"

namespace stoker::models {
namespace nn = torch::nn;

namespace {
// The projection shortcut where the block changes the shape (stride or channels), else empty.
nn::Sequential shortcut_for(int64_t in, int64_t out, int64_t stride) {
  if (stride == 1 && in == out) return nullptr;
  return nn::Sequential(conv1x1(in, out, stride), BatchNorm2d(out));
}
}  // namespace

torch::Tensor drop_path(const torch::Tensor& x, double rate, bool training) {
  if (!training || rate <= 0) return x;
  const double keep = 1.0 - rate;
  std::vector<int64_t> shape(static_cast<size_t>(x.dim()), 1);
  shape[0] = x.size(0);
  torch::Tensor mask = torch::empty(shape, x.options()).bernoulli_(keep);
  if (keep > 0) mask.div_(keep);
  return x * mask;
}

std::vector<double> drop_path_rates(double rate, int64_t blocks) {
  std::vector<double> out;
  for (int64_t i = 0; i < blocks; ++i) {
    out.push_back(blocks == 1 ? rate : rate * static_cast<double>(i) / static_cast<double>(blocks - 1));
  }
  return out;
}

int64_t apply_drop_path(torch::nn::Module& model, double rate) {
  std::vector<std::function<void(double)>> setters;
  for (const auto& m : model.modules(/*include_self=*/false)) {
    if (auto* b = m->as<BasicBlockImpl>()) setters.push_back([b](double r) { b->set_drop_path(r); });
    if (auto* b = m->as<BottleneckImpl>()) setters.push_back([b](double r) { b->set_drop_path(r); });
  }
  const std::vector<double> rates = drop_path_rates(rate, static_cast<int64_t>(setters.size()));
  for (size_t i = 0; i < setters.size(); ++i) setters[i](rates[i]);
  return static_cast<int64_t>(setters.size());
}

nn::Conv2d conv3x3(int64_t in, int64_t out, int64_t stride) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}

nn::Conv2d conv1x1(int64_t in, int64_t out, int64_t stride) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false));
}

BasicBlockImpl::BasicBlockImpl(int64_t inplanes, int64_t planes, int64_t stride,
                               const std::string& shortcut_name)
    : shortcut_name_(shortcut_name) {
  // Registration (and so default-initialisation) order: conv1, bn1, conv2, bn2, shortcut.
  conv1 = register_module("conv1", conv3x3(inplanes, planes, stride));
  bn1 = register_module("bn1", BatchNorm2d(planes));
  conv2 = register_module("conv2", conv3x3(planes, planes, 1));
  bn2 = register_module("bn2", BatchNorm2d(planes));
  if (nn::Sequential s = shortcut_for(inplanes, planes * expansion, stride)) {
    shortcut = register_module(shortcut_name, s);
  }
}

torch::Tensor BasicBlockImpl::forward(const torch::Tensor& x) {
  return run_block(*this, x, [this](const torch::Tensor& in) { return body(in); });
}

torch::Tensor BasicBlockImpl::body(const torch::Tensor& x) {
  torch::Tensor out = torch::relu(bn1(conv1(x)));
  out = drop_path(bn2(conv2(out)), drop_path_, is_training());
  out += shortcut ? shortcut->forward(x) : x;
  return torch::relu(out);
}

BottleneckImpl::BottleneckImpl(int64_t inplanes, int64_t planes, int64_t stride) {
  conv1 = register_module("conv1", conv1x1(inplanes, planes, 1));
  bn1 = register_module("bn1", BatchNorm2d(planes));
  conv2 = register_module("conv2", conv3x3(planes, planes, stride));
  bn2 = register_module("bn2", BatchNorm2d(planes));
  conv3 = register_module("conv3", conv1x1(planes, planes * expansion, 1));
  bn3 = register_module("bn3", BatchNorm2d(planes * expansion));
  if (nn::Sequential s = shortcut_for(inplanes, planes * expansion, stride)) {
    downsample = register_module("downsample", s);
  }
}

torch::Tensor BottleneckImpl::forward(const torch::Tensor& x) {
  return run_block(*this, x, [this](const torch::Tensor& in) { return body(in); });
}

torch::Tensor BottleneckImpl::body(const torch::Tensor& x) {
  torch::Tensor out = torch::relu(bn1(conv1(x)));
  out = torch::relu(bn2(conv2(out)));
  out = drop_path(bn3(conv3(out)), drop_path_, is_training());
  out += downsample ? downsample->forward(x) : x;
  return torch::relu(out);
}

// relu(bn1(conv1(x))), bn2(conv2(.)), plus the shortcut, relu: as forward, drop_path the identity.
std::string basic_block_to_onnx(onnx::OnnxExport& e, const BasicBlockImpl& block, const std::string& x) {
  std::string out = e.op("Relu", {e.child(block, "bn1", e.child(block, "conv1", x))});
  out = e.child(block, "bn2", e.child(block, "conv2", out));
  const std::string& name = block.shortcut_name();
  const std::string shortcut = e.has_child(block, name) ? e.child(block, name, x) : x;
  return e.op("Relu", {e.op("Add", {out, shortcut})});
}

std::string bottleneck_to_onnx(onnx::OnnxExport& e, const BottleneckImpl& block, const std::string& x) {
  std::string out = e.op("Relu", {e.child(block, "bn1", e.child(block, "conv1", x))});
  out = e.op("Relu", {e.child(block, "bn2", e.child(block, "conv2", out))});
  out = e.child(block, "bn3", e.child(block, "conv3", out));
  const std::string shortcut = e.has_child(block, "downsample") ? e.child(block, "downsample", x) : x;
  return e.op("Relu", {e.op("Add", {out, shortcut})});
}

// The ResNet blocks' exporters (shared by the torchvision, CIFAR and compact ResNets).
void register_blocks(FamilyRegistrar& r) {
  r.exporter<BasicBlockImpl>(&basic_block_to_onnx);
  r.exporter<BottleneckImpl>(&bottleneck_to_onnx);
}

}  // namespace stoker::models
