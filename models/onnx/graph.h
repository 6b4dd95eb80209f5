// An ONNX graph under construction, in plain C++ and libtorch tensors (no protobuf in sight): the
// nodes in execution order, the initializers (weights, as CPU tensors, by name), the graph's inputs
// and outputs; and the passes the exporter runs on it before it is written: fold_batch_norms (a
// BatchNormalization after a Conv folded into the Conv's weights and bias) and to_float16 (the
// weights in half precision). models/onnx/proto.h turns it into an onnx::ModelProto, checks it and
// infers its shapes; models/onnx/export.h builds it from a module tree.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include <torch/types.h>

namespace stoker::models::onnx {

// One attribute of a node: an integer, a float, a string, or a list of integers or floats.
struct OnnxAttribute {
  std::string name;
  std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>> value;
};

struct OnnxNode {
  std::string op;    // the operator, e.g. "Conv" (the default domain, ai.onnx)
  std::string name;  // unique in the graph: the module path and the operator, "layer1.0.conv1/Conv"
  std::vector<std::string> inputs, outputs;
  std::vector<OnnxAttribute> attributes;

  // The attribute `name`, or nullptr.
  const OnnxAttribute* attribute(const std::string& name) const;
};

// A graph input or output: its name, element type and dimensions (-1: the symbolic batch size).
struct OnnxValueInfo {
  std::string name;
  torch::ScalarType dtype = torch::kFloat32;
  std::vector<int64_t> dims;
};

class OnnxGraph {
 public:
  std::string name = "stoker";
  std::vector<OnnxNode> nodes;
  std::vector<OnnxValueInfo> inputs, outputs;

  // A name no value or node of the graph has yet: `base`, or `base` with a number appended.
  std::string fresh_name(const std::string& base);
  // Appends a node of `op` named fresh_name(`name`), with one output of that same name; returns it.
  std::string add_node(const std::string& op, const std::string& name, std::vector<std::string> inputs,
                       std::vector<OnnxAttribute> attributes = {});

  // Adds `value` (copied to a contiguous CPU tensor) as an initializer named fresh_name(`name`);
  // returns the name.
  std::string add_initializer(const std::string& name, const torch::Tensor& value);
  // The initializer `name`, or nullptr.
  const torch::Tensor* initializer(const std::string& name) const;
  void set_initializer(const std::string& name, const torch::Tensor& value);
  void remove_initializer(const std::string& name);
  // The initializers in the order they were added.
  const std::vector<std::pair<std::string, torch::Tensor>>& initializers() const { return initializers_; }

  // How many node inputs and graph outputs read the value `name`.
  int64_t uses(const std::string& name) const;
  // The index of the node whose output `name` is, or -1.
  int64_t producer(const std::string& name) const;
  // Renames the value `from` to `to` wherever it is read or written.
  void rename_value(const std::string& from, const std::string& to);

 private:
  std::vector<std::pair<std::string, torch::Tensor>> initializers_;
  std::set<std::string> names_;  // every value, initializer and node name taken
};

// Folds each BatchNormalization whose input is a Conv's output read by nothing else into that
// Conv: weight * gamma / sqrt(var + eps) per output channel, bias (bias - mean) * gamma / sqrt(var +
// eps) + beta, computed in float64. The Conv takes over the BatchNormalization's output;
// initializers nothing reads any more are removed. Returns how many were folded. A weight that
// another node also reads is left unfolded.
int64_t fold_batch_norms(OnnxGraph& graph);

// Every float32 initializer but those in `keep` as float16. A value beyond float16's range (65504)
// is a stoker::Error naming the initializer.
void to_float16(OnnxGraph& graph, const std::set<std::string>& keep);

}  // namespace stoker::models::onnx
