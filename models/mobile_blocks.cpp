// The blocks EfficientNet and MobileNetV3 share (models/mobile_blocks.h).
#include "models/mobile_blocks.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <torch/torch.h>

#include "common/error.h"
#include "models/blocks.h"
#include "models/onnx/export.h"
#include "models/onnx/nn.h"
#include "models/registry.h"
#include "models/timm.h"

namespace stoker::models {
namespace nn = torch::nn;

torch::Tensor activate(const torch::Tensor& x, Activation activation) {
  switch (activation) {
    case Activation::kNone: return x;
    case Activation::kReLU: return torch::relu(x);
    case Activation::kSiLU: return torch::silu(x);
    case Activation::kHardswish: return torch::hardswish(x);
    case Activation::kSigmoid: return torch::sigmoid(x);
    case Activation::kHardsigmoid: return torch::hardsigmoid(x);
  }
  return x;
}

int64_t make_divisible(double v, int64_t divisor, int64_t min_value) {
  if (min_value == 0) min_value = divisor;
  // int(v + divisor / 2) // divisor * divisor, as Python computes it for v > 0.
  const auto rounded = static_cast<int64_t>(v + static_cast<double>(divisor) / 2) / divisor * divisor;
  int64_t out = std::max(min_value, rounded);
  if (static_cast<double>(out) < 0.9 * v) out += divisor;
  return out;
}

ConvNormActivationImpl::ConvNormActivationImpl(int64_t in, int64_t out, const ConvNormSettings& s)
    : activation_(s.activation) {
  STOKER_CHECK(in > 0 && out > 0 && s.kernel > 0 && s.stride > 0 && s.groups > 0 && s.dilation > 0,
               "a convolution needs positive channels, kernel, stride, groups and dilation; got {} -> {}, "
               "kernel {}, stride {}, groups {}, dilation {}",
               in, out, s.kernel, s.stride, s.groups, s.dilation);
  conv = register_module("0", nn::Conv2d(nn::Conv2dOptions(in, out, s.kernel)
                                             .stride(s.stride)
                                             .padding((s.kernel - 1) / 2 * s.dilation)
                                             .dilation(s.dilation)
                                             .groups(s.groups)
                                             .bias(false)));
  norm = register_module("1", BatchNorm2d(nn::BatchNorm2dOptions(out).eps(s.norm.eps).momentum(s.norm.momentum)));
}

torch::Tensor ConvNormActivationImpl::forward(const torch::Tensor& x) {
  return activate(norm(conv(x)), activation_);
}

SqueezeExcitationImpl::SqueezeExcitationImpl(int64_t channels, int64_t squeeze, Activation activation,
                                             Activation gate)
    : activation_(activation), gate_(gate) {
  fc1 = register_module("fc1", nn::Conv2d(nn::Conv2dOptions(channels, squeeze, 1)));
  fc2 = register_module("fc2", nn::Conv2d(nn::Conv2dOptions(squeeze, channels, 1)));
}

torch::Tensor SqueezeExcitationImpl::forward(const torch::Tensor& x) {
  // The mean over H and W keeps [N, C, 1, 1] (adaptive_avg_pool2d to 1, without its dispatch).
  const torch::Tensor pooled = x.mean({2, 3}, /*keepdim=*/true);
  return x * activate(fc2(activate(fc1(pooled), activation_)), gate_);
}

InvertedResidualImpl::InvertedResidualImpl(const InvertedResidualSettings& s) {
  STOKER_CHECK(s.stride == 1 || s.stride == 2, "an inverted residual block's stride is 1 or 2, got {}", s.stride);
  residual_ = s.stride == 1 && s.in == s.out;
  block = nn::Sequential();
  if (s.expanded != s.in) {
    block->push_back(ConvNormActivation(s.in, s.expanded, ConvNormSettings{1, 1, 1, 1, s.activation, s.norm}));
  }
  block->push_back(
      ConvNormActivation(s.expanded, s.expanded, ConvNormSettings{s.kernel, s.stride, s.expanded, 1, s.activation, s.norm}));
  if (s.squeeze > 0) block->push_back(SqueezeExcitation(s.expanded, s.squeeze, s.se_activation, s.se_gate));
  block->push_back(ConvNormActivation(s.expanded, s.out, ConvNormSettings{1, 1, 1, 1, Activation::kNone, s.norm}));
  register_module("block", block);
}

torch::Tensor InvertedResidualImpl::forward(const torch::Tensor& x) {
  // model.activation_checkpointing: recomputed in backward when chosen (models/activation_checkpointing.h).
  return run_block(*this, x, [this](const torch::Tensor& in) {
    torch::Tensor y = block->forward(in);
    if (!residual_) return y;
    return drop_path(y, drop_path_, is_training()) + in;
  });
}

std::vector<double> stochastic_depth_rates(double rate, int64_t blocks) {
  std::vector<double> out;
  for (int64_t i = 0; i < blocks; ++i) out.push_back(rate * static_cast<double>(i) / static_cast<double>(blocks));
  return out;
}

int64_t apply_stochastic_depth(torch::nn::Module& model, double rate) {
  std::vector<InvertedResidualImpl*> blocks;
  for (const auto& m : model.modules(/*include_self=*/false)) {
    if (auto* b = m->as<InvertedResidualImpl>()) blocks.push_back(b);
  }
  const std::vector<double> rates = stochastic_depth_rates(rate, static_cast<int64_t>(blocks.size()));
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i]->set_drop_path(rates[i]);
  return static_cast<int64_t>(blocks.size());
}

void init_mobile_weights(torch::nn::Module& model, LinearInit linear) {
  torch::NoGradGuard no_grad;
  for (const auto& m : model.modules(/*include_self=*/false)) {
    if (auto* conv = m->as<nn::Conv2d>()) {
      nn::init::kaiming_normal_(conv->weight, 0.0, torch::kFanOut, torch::kReLU);
      if (conv->bias.defined()) nn::init::zeros_(conv->bias);
    } else if (auto* bn = m->as<nn::BatchNorm2d>()) {
      nn::init::ones_(bn->weight);
      nn::init::zeros_(bn->bias);
    } else if (auto* fc = m->as<nn::Linear>()) {
      if (linear == LinearInit::kUniformByOutputs) {
        const double range = 1.0 / std::sqrt(static_cast<double>(fc->options.out_features()));
        nn::init::uniform_(fc->weight, -range, range);
      } else {
        nn::init::normal_(fc->weight, 0.0, 0.01);
      }
      nn::init::zeros_(fc->bias);
    }
  }
}

std::string onnx_activate(onnx::OnnxExport& e, const std::string& x, Activation activation) {
  switch (activation) {
    case Activation::kNone: return x;
    case Activation::kReLU: return e.op("Relu", {x});
    case Activation::kSiLU: return e.op("Mul", {x, e.op("Sigmoid", {x})});
    case Activation::kHardswish: return onnx_hardswish(e, x);
    case Activation::kSigmoid: return e.op("Sigmoid", {x});
    case Activation::kHardsigmoid: return e.op("HardSigmoid", {x}, {{"alpha", 1.0 / 6.0}, {"beta", 0.5}});
  }
  return x;
}

std::string conv_norm_activation_to_onnx(onnx::OnnxExport& e, const ConvNormActivationImpl& m, const std::string& x) {
  return onnx_activate(e, e.child(m, "1", e.child(m, "0", x)), m.activation());
}

std::string squeeze_excitation_to_onnx(onnx::OnnxExport& e, const SqueezeExcitationImpl& m, const std::string& x) {
  const std::string squeezed = onnx_activate(e, e.child(m, "fc1", e.op("GlobalAveragePool", {x})), m.activation());
  return e.op("Mul", {x, onnx_activate(e, e.child(m, "fc2", squeezed), m.gate())});
}

std::string inverted_residual_to_onnx(onnx::OnnxExport& e, const InvertedResidualImpl& m, const std::string& x) {
  const std::string y = e.child(m, "block", x);
  return m.residual() ? e.op("Add", {y, x}) : y;
}

namespace {

// timm's names of a block's convolutions (conv, its batch norm) in order: an expanding block's
// conv_pw/bn1, conv_dw/bn2, conv_pwl/bn3; timm's depthwise-separable block's conv_dw/bn1, conv_pw/bn2.
std::vector<std::pair<std::string, std::string>> timm_block_convs(size_t count) {
  if (count == 2) return {{"conv_dw", "bn1"}, {"conv_pw", "bn2"}};
  return {{"conv_pw", "bn1"}, {"conv_dw", "bn2"}, {"conv_pwl", "bn3"}};
}

}  // namespace

std::map<std::string, std::pair<std::string, std::string>> timm_mobile_block_parts(const std::vector<std::string>& keys) {
  // Each block's children: the indices of its convolutions (ConvNormActivation) and of its squeeze-and-excitation.
  std::map<std::string, std::set<int>> convs, excitations;
  for (const std::string& key : keys) {
    const size_t at = key.find(".block.");
    if (at == std::string::npos) continue;
    const std::string prefix = key.substr(0, at + 1), rest = key.substr(at + 7);
    const int child = std::stoi(rest.substr(0, rest.find('.')));
    const bool se = rest.find(".fc1.") != std::string::npos || rest.find(".fc2.") != std::string::npos;
    (se ? excitations : convs)[prefix].insert(child);
  }
  std::map<std::string, std::pair<std::string, std::string>> out;
  for (const std::string& key : keys) {
    const size_t at = key.find(".block.");
    if (at == std::string::npos) continue;
    const std::string prefix = key.substr(0, at + 1), rest = key.substr(at + 7);
    const size_t dot = rest.find('.');
    const int child = std::stoi(rest.substr(0, dot));
    const std::string inner = rest.substr(dot + 1);  // "0.weight" (conv), "1.bias" (norm), "fc1.weight" (SE)
    if (excitations[prefix].count(child)) {
      out[key] = {prefix, (inner.rfind("fc1.", 0) == 0 ? "se.conv_reduce." : "se.conv_expand.") + inner.substr(4)};
      continue;
    }
    const std::set<int>& own = convs[prefix];
    const auto roles = timm_block_convs(own.size());
    const size_t index = static_cast<size_t>(std::distance(own.begin(), own.find(child)));
    if (index >= roles.size()) continue;  // a layout timm has not: the key keeps its name and does not fit
    const std::string module = inner.rfind("0.", 0) == 0 ? roles[index].first : roles[index].second;
    out[key] = {prefix, module + "." + inner.substr(2)};
  }
  return out;
}

// The mobile blocks' exporters (shared by EfficientNet and MobileNetV3).
void register_mobile_blocks(FamilyRegistrar& r) {
  r.exporter<ConvNormActivationImpl>(&conv_norm_activation_to_onnx);
  r.exporter<SqueezeExcitationImpl>(&squeeze_excitation_to_onnx);
  r.exporter<InvertedResidualImpl>(&inverted_residual_to_onnx);
}

}  // namespace stoker::models
