// An ONNX graph under construction and its passes (models/onnx/graph.h).
#include "models/onnx/graph.h"

#include <algorithm>

#include <torch/torch.h>

#include "common/error.h"

namespace stoker::models::onnx {

const OnnxAttribute* OnnxNode::attribute(const std::string& wanted) const {
  for (const OnnxAttribute& a : attributes) {
    if (a.name == wanted) return &a;
  }
  return nullptr;
}

std::string OnnxGraph::fresh_name(const std::string& base) {
  std::string name = base;
  for (int64_t n = 1; names_.count(name) > 0; ++n) name = base + "_" + std::to_string(n);
  names_.insert(name);
  return name;
}

std::string OnnxGraph::add_node(const std::string& op, const std::string& name, std::vector<std::string> inputs,
                                std::vector<OnnxAttribute> attributes) {
  OnnxNode node;
  node.op = op;
  node.name = fresh_name(name);
  node.inputs = std::move(inputs);
  node.outputs = {node.name};
  node.attributes = std::move(attributes);
  nodes.push_back(std::move(node));
  return nodes.back().name;
}

std::string OnnxGraph::add_initializer(const std::string& name, const torch::Tensor& value) {
  const std::string unique = fresh_name(name);
  initializers_.emplace_back(unique, value.detach().to(torch::kCPU).contiguous().clone());
  return unique;
}

const torch::Tensor* OnnxGraph::initializer(const std::string& name) const {
  for (const auto& [n, t] : initializers_) {
    if (n == name) return &t;
  }
  return nullptr;
}

void OnnxGraph::set_initializer(const std::string& name, const torch::Tensor& value) {
  for (auto& [n, t] : initializers_) {
    if (n == name) t = value.detach().to(torch::kCPU).contiguous();
  }
}

void OnnxGraph::remove_initializer(const std::string& name) {
  initializers_.erase(std::remove_if(initializers_.begin(), initializers_.end(),
                                     [&](const auto& entry) { return entry.first == name; }),
                      initializers_.end());
}

int64_t OnnxGraph::uses(const std::string& name) const {
  int64_t n = 0;
  for (const OnnxNode& node : nodes) n += std::count(node.inputs.begin(), node.inputs.end(), name);
  for (const OnnxValueInfo& out : outputs) n += out.name == name ? 1 : 0;
  return n;
}

int64_t OnnxGraph::producer(const std::string& name) const {
  for (size_t i = 0; i < nodes.size(); ++i) {
    const auto& outs = nodes[i].outputs;
    if (std::find(outs.begin(), outs.end(), name) != outs.end()) return static_cast<int64_t>(i);
  }
  return -1;
}

void OnnxGraph::rename_value(const std::string& from, const std::string& to) {
  names_.insert(to);
  for (OnnxNode& node : nodes) {
    std::replace(node.inputs.begin(), node.inputs.end(), from, to);
    std::replace(node.outputs.begin(), node.outputs.end(), from, to);
  }
  for (OnnxValueInfo& v : inputs) v.name = v.name == from ? to : v.name;
  for (OnnxValueInfo& v : outputs) v.name = v.name == from ? to : v.name;
}

namespace {

// Whether the BatchNormalization `bn` can fold into the node that produces its input; that node's
// index, or -1.
int64_t foldable_conv(const OnnxGraph& g, const OnnxNode& bn) {
  if (bn.inputs.size() != 5 || bn.outputs.size() != 1) return -1;
  const int64_t conv = g.producer(bn.inputs[0]);
  if (conv < 0 || g.nodes[conv].op != "Conv" || g.uses(bn.inputs[0]) != 1) return -1;
  const OnnxNode& c = g.nodes[conv];
  if (c.inputs.size() < 2 || g.initializer(c.inputs[1]) == nullptr || g.uses(c.inputs[1]) != 1) return -1;
  if (c.inputs.size() == 3 && (g.initializer(c.inputs[2]) == nullptr || g.uses(c.inputs[2]) != 1)) return -1;
  for (size_t i = 1; i < 5; ++i) {
    if (g.initializer(bn.inputs[i]) == nullptr) return -1;
  }
  return conv;
}

void fold_one(OnnxGraph& g, size_t bn_index, size_t conv_index) {
  const OnnxNode bn = g.nodes[bn_index];
  OnnxNode& conv = g.nodes[conv_index];
  const OnnxAttribute* eps_attribute = bn.attribute("epsilon");
  const double eps = eps_attribute != nullptr ? std::get<double>(eps_attribute->value) : 1e-5;
  auto f64 = [&](const std::string& name) { return g.initializer(name)->to(torch::kFloat64); };
  const torch::Tensor weight = *g.initializer(conv.inputs[1]);
  const torch::Tensor scale = f64(bn.inputs[1]) / (f64(bn.inputs[4]) + eps).sqrt();
  std::vector<int64_t> per_channel(static_cast<size_t>(weight.dim()), 1);
  per_channel[0] = -1;
  const torch::Tensor bias = conv.inputs.size() == 3 ? f64(conv.inputs[2]) : torch::zeros_like(scale);
  g.set_initializer(conv.inputs[1], (weight.to(torch::kFloat64) * scale.view(per_channel)).to(weight.scalar_type()));
  const torch::Tensor folded_bias = ((bias - f64(bn.inputs[3])) * scale + f64(bn.inputs[2])).to(weight.scalar_type());
  if (conv.inputs.size() == 3) {
    g.set_initializer(conv.inputs[2], folded_bias);
  } else {
    // The weight's name with .bias for .weight: "layer1.0.conv1.bias".
    std::string base = conv.inputs[1];
    const std::string suffix = ".weight";
    if (base.size() > suffix.size() && base.compare(base.size() - suffix.size(), suffix.size(), suffix) == 0) {
      base.resize(base.size() - suffix.size());
    }
    conv.inputs.push_back(g.add_initializer(base + ".bias", folded_bias));
  }
  conv.outputs[0] = bn.outputs[0];
  g.nodes.erase(g.nodes.begin() + static_cast<std::ptrdiff_t>(bn_index));
  for (size_t i = 1; i < 5; ++i) {
    if (g.uses(bn.inputs[i]) == 0) g.remove_initializer(bn.inputs[i]);
  }
}

}  // namespace

int64_t fold_batch_norms(OnnxGraph& graph) {
  torch::NoGradGuard no_grad;
  int64_t folded = 0;
  for (size_t i = 0; i < graph.nodes.size();) {
    const int64_t conv = graph.nodes[i].op == "BatchNormalization" ? foldable_conv(graph, graph.nodes[i]) : -1;
    if (conv < 0) {
      ++i;
      continue;
    }
    fold_one(graph, i, static_cast<size_t>(conv));  // removes node i: the next one moves there
    ++folded;
  }
  return folded;
}

void to_float16(OnnxGraph& graph, const std::set<std::string>& keep) {
  constexpr double kHalfMax = 65504.0;
  std::vector<std::pair<std::string, torch::Tensor>> converted;
  for (const auto& [name, t] : graph.initializers()) {
    if (t.scalar_type() != torch::kFloat32 || keep.count(name) > 0) continue;
    const double largest = t.numel() > 0 ? t.abs().max().item<double>() : 0.0;
    STOKER_CHECK(largest <= kHalfMax,
                 "the weight {} holds {:g}, beyond float16's largest value ({:g}); export it with --dtype float32",
                 name, largest, kHalfMax);
    converted.emplace_back(name, t.to(torch::kFloat16));
  }
  for (const auto& [name, t] : converted) graph.set_initializer(name, t);
}

}  // namespace stoker::models::onnx
