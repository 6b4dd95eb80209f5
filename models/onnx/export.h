// ONNX export of a libtorch module tree, written in C++: a registry of exporters per module type
// (as torch.onnx registers a symbolic function per operator, and as models are registered by
// name), the context an exporter writes its nodes through (OnnxExport), and export_onnx, which
// walks a model from its root and returns the bytes of a checked ONNX model. The process-wide
// registry, with every module type Stoker ships, is models/registry.h's onnx_exporter_registry().
//
// An exporter turns one module, in eval mode, into ONNX nodes: given the graph value of its input
// it returns the value of its output. It names its parameters and buffers (they become the graph's
// initializers, named by their state-dict path, `layer1.0.conv1.weight`) and hands its children
// on by name, each exported by the exporter registered for the child's own type:
//
//   // BasicBlock: relu(bn1(conv1(x))), bn2(conv2(.)), plus the shortcut, relu (models/blocks.cpp).
//   std::string basic_block_to_onnx(OnnxExport& e, const BasicBlockImpl& block, const std::string& x) {
//     std::string out = e.op("Relu", {e.child(block, "bn1", e.child(block, "conv1", x))});
//     out = e.child(block, "bn2", e.child(block, "conv2", out));
//     const std::string& name = block.shortcut_name();  // "downsample" (or the compact ResNet's "shortcut")
//     const std::string shortcut = e.has_child(block, name) ? e.child(block, name, x) : x;
//     return e.op("Relu", {e.op("Add", {out, shortcut})});
//   }
//   r.exporter<BasicBlockImpl>(&basic_block_to_onnx);  // blocks.cpp, register_blocks
//
// Stoker's own modules' exporters sit beside the modules and are registered there, one line each, in
// their family's register_<family> (models/registry.h, FamilyRegistrar); libtorch's (Conv2d,
// BatchNorm2d, Linear, pooling, ...) are in models/onnx/nn.cpp. An application registers its own with
// register_onnx_exporter. A module type without an exporter (an application's own) is a
// stoker::Error naming its path and type and how to register one (docs/trainer.md, "Adding an ONNX
// exporter").
// Convolutions followed by batch norms are written plainly and folded afterwards (models/onnx/graph.h).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include <torch/nn/module.h>

#include "common/registry.h"
#include "models/onnx/graph.h"

namespace stoker::models::onnx {

class OnnxExport;

// Writes the nodes of one module (`module`, of the type it is registered for) reading `input`;
// returns the name of the value its forward returns.
using OnnxExporter = std::function<std::string(OnnxExport&, const torch::nn::Module& module, const std::string& input)>;

// The registry's key of a module: its C++ type's demangled name ("stoker::models::BasicBlockImpl",
// "torch::nn::Conv2dImpl").
std::string onnx_module_type(const std::type_info& type);
inline std::string onnx_module_type(const torch::nn::Module& m) { return onnx_module_type(typeid(m)); }

// `exporter`, written for modules of type `M` (the Impl class: `MyBlockImpl`), as the registry holds it.
template <typename M>
OnnxExporter onnx_exporter(std::function<std::string(OnnxExport&, const M&, const std::string&)> exporter) {
  return [exporter](OnnxExport& e, const torch::nn::Module& m, const std::string& x) {
    return exporter(e, dynamic_cast<const M&>(m), x);
  };
}

// Adds `exporter` for modules of type `M` to `registry`; a second exporter for one type is refused.
template <typename M>
void add_onnx_exporter(Registry<OnnxExporter>& registry,
                       std::function<std::string(OnnxExport&, const M&, const std::string&)> exporter) {
  registry.add(onnx_module_type(typeid(M)), onnx_exporter<M>(std::move(exporter)));
}

// What an exporter writes its nodes through: the graph, the path of the module being exported, and
// the export's settings.
class OnnxExport {
 public:
  // Exports into `graph` with the exporters of `exporters` (models/registry.h: the process-wide ones).
  OnnxExport(OnnxGraph& graph, const Registry<OnnxExporter>& exporters, int64_t opset, std::string what);

  // The child `name` of `parent` (its registered name: "conv1", "layer1", "0") exported on `input`.
  std::string child(const torch::nn::Module& parent, const std::string& name, const std::string& input);
  bool has_child(const torch::nn::Module& parent, const std::string& name) const;
  // Every child of `parent` in registration order, each on the previous one's output (a Sequential).
  std::string children(const torch::nn::Module& parent, const std::string& input);
  // `module` exported on `input` under the path `path` ("" for the root).
  std::string module(const torch::nn::Module& module, const std::string& path, const std::string& input);

  // The parameter or buffer `name` of the module being exported, as an initializer named by its
  // state-dict path ("layer1.0.conv1.weight"); the same tensor read twice is one initializer.
  std::string param(const std::string& name);
  // A constant of the exporter's own (a reshape's target shape, the normalisation's mean), named
  // `<module path>.<name>`.
  std::string constant(const std::string& name, const torch::Tensor& value);
  // A node of `op` on `inputs`, named `<module path>/<op>`; returns its one output.
  std::string op(const std::string& op, std::vector<std::string> inputs, std::vector<OnnxAttribute> attributes = {});

  // The static dimensions of the value `name` (-1 where symbolic: a dynamic batch), from ONNX's
  // shape inference; a stoker::Error when it cannot tell them.
  std::vector<int64_t> shape(const std::string& name);

  int64_t opset() const { return opset_; }
  const std::string& path() const { return path_; }  // of the module being exported ("" at the root)
  const torch::nn::Module& current() const { return *current_; }
  OnnxGraph& graph() { return graph_; }

 private:
  OnnxGraph& graph_;
  const Registry<OnnxExporter>& exporters_;
  int64_t opset_;
  std::string what_;  // the model, for messages: "model.type resnet18"
  std::string path_;
  const torch::nn::Module* current_ = nullptr;
  std::vector<std::pair<const void*, std::string>> params_;  // tensor storage -> initializer
};

struct OnnxExportOptions {
  std::string what = "the model";  // named in messages: "model.type resnet18"
  int64_t opset = 17;              // of ai.onnx; 13 to onnx_max_opset()
  std::vector<int64_t> input_chw;  // channels, height, width of the input
  bool dynamic_batch = false;      // a symbolic batch dimension ("batch"), else `batch`
  int64_t batch = 1;
  // The input normalisation as the graph's first nodes ((x - mean) / std, x in [0, 1]), when given.
  std::vector<double> mean, std;
  torch::ScalarType dtype = torch::kFloat32;  // of the weights and the computation: kFloat32 or kFloat16
  std::string input_name = "input", output_name = "logits";
  int64_t num_classes = 0;  // the output's width, checked when > 0
  std::string producer_version, doc;
  std::vector<std::pair<std::string, std::string>> metadata;  // the model's metadata_props
};

// Exports `model` (put in eval mode for the export, then restored) as an ONNX model: input
// `input_name` [N, C, H, W] float32, output `output_name` [N, classes] float32 (with kFloat16 the
// graph casts after the input and before the output, so callers feed and read float32 either way).
// Conv + BatchNormalization pairs are folded. Returns the model's bytes after ONNX's checker and
// shape inference passed (models/onnx/proto.h). Each module is exported by `exporters`' entry for its type
// (onnx_exporter_registry(), models/registry.h, holds Stoker's and libtorch's). `folded`, when given,
// receives the count of folded batch norms.
std::string export_onnx(torch::nn::Module& model, const OnnxExportOptions& options,
                        const Registry<OnnxExporter>& exporters, int64_t* folded = nullptr);

}  // namespace stoker::models::onnx
