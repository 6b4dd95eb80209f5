// OnnxGraph (models/onnx/graph.h) to and from ONNX's own protobuf classes (Debian's libonnx-dev):
// the bytes of a checked onnx::ModelProto, ONNX's shape inference on a graph under construction,
// and what a written file holds. The only file of Stoker that sees protobuf; this header does not,
// so the rest of the tree compiles without ONNX's headers.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "models/onnx/graph.h"

namespace stoker::models::onnx {

// What a model file says besides its graph.
struct OnnxModelInfo {
  int64_t opset = 17;              // of the default domain (ai.onnx)
  std::string producer_version;    // Stoker's version
  std::string doc;                 // the model's doc_string
  std::vector<std::pair<std::string, std::string>> metadata;  // metadata_props, in order
};

// ONNX's element type (TensorProto.DataType: 1 float, 10 float16, 7 int64, ...) of a tensor type,
// as a Cast node's `to` names it.
int64_t onnx_element_type(torch::ScalarType type);

// The newest opset of the default domain the linked ONNX library knows (17 for Debian 12's 1.12).
int64_t onnx_max_opset();

// The ModelProto of `graph`, serialised, after ONNX's checker (onnx::checker::check_model) and its
// strict shape inference (types checked, node errors thrown) passed; the inferred shapes of the
// values between nodes go into the file (value_info). A stoker::Error naming what ONNX refused.
std::string serialize_onnx_model(const OnnxGraph& graph, const OnnxModelInfo& info);

// The dimensions ONNX's shape inference gives each value of `graph` (inputs, initializers and node
// outputs; -1 for a symbolic one, such as a dynamic batch), without the weights' bytes. Values it
// cannot tell are left out. For exporters that need a size (an adaptive pooling's window).
std::map<std::string, std::vector<int64_t>> infer_onnx_shapes(const OnnxGraph& graph, int64_t opset);

// What an ONNX file holds, read back with ONNX's classes (for tests and the export's log line).
struct OnnxModelSummary {
  int64_t ir_version = 0;
  int64_t opset = 0;
  std::string producer_name, producer_version;
  std::vector<std::string> ops;  // the nodes' operators, in order
  std::vector<OnnxValueInfo> inputs, outputs;  // dims -1 where symbolic
  std::vector<std::string> symbolic_dims;      // the names of the inputs' and outputs' symbolic dims
  std::vector<std::pair<std::string, torch::ScalarType>> initializers;  // name and element type
  std::vector<std::pair<std::string, std::string>> metadata;
  int64_t count(const std::string& op) const;
  std::string metadata_value(const std::string& key) const;  // "" when absent
};

// Parses and checks (onnx::checker::check_model) the bytes of a model file; a stoker::Error naming
// `what` when they are no valid model.
OnnxModelSummary read_onnx_model(const std::string& bytes, const std::string& what);

}  // namespace stoker::models::onnx
