// OnnxGraph to and from ONNX's protobuf classes (models/onnx/proto.h). Compiled with ONNX's own
// definitions (ONNX_NAMESPACE=onnx, ONNX_ML=1: the ones Debian's libonnx was built with) and
// without the precompiled header; see CMakeLists.txt.
#include "models/onnx/proto.h"

#include <limits>

#include <fmt/format.h>
#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>
#include <torch/torch.h>

#include "common/error.h"

namespace stoker::models::onnx {
namespace {

constexpr const char* kBatchDim = "batch";  // the name of a symbolic (dynamic) batch dimension

struct TypePair {
  torch::ScalarType torch;
  ::onnx::TensorProto_DataType onnx;
};
constexpr TypePair kTypes[] = {
    {torch::kFloat32, ::onnx::TensorProto_DataType_FLOAT},   {torch::kFloat16, ::onnx::TensorProto_DataType_FLOAT16},
    {torch::kFloat64, ::onnx::TensorProto_DataType_DOUBLE},  {torch::kBFloat16, ::onnx::TensorProto_DataType_BFLOAT16},
    {torch::kInt64, ::onnx::TensorProto_DataType_INT64},     {torch::kInt32, ::onnx::TensorProto_DataType_INT32},
    {torch::kInt8, ::onnx::TensorProto_DataType_INT8},       {torch::kUInt8, ::onnx::TensorProto_DataType_UINT8},
    {torch::kBool, ::onnx::TensorProto_DataType_BOOL},
};

::onnx::TensorProto_DataType onnx_type(torch::ScalarType t) {
  for (const TypePair& p : kTypes) {
    if (p.torch == t) return p.onnx;
  }
  STOKER_FAIL("a tensor of type {} has no ONNX element type Stoker writes", c10::toString(t));
}

torch::ScalarType torch_type(int32_t t) {
  for (const TypePair& p : kTypes) {
    if (p.onnx == t) return p.torch;
  }
  return torch::ScalarType::Undefined;
}

void set_attribute(::onnx::AttributeProto& a, const OnnxAttribute& attribute) {
  a.set_name(attribute.name);
  if (const auto* i = std::get_if<int64_t>(&attribute.value)) {
    a.set_type(::onnx::AttributeProto_AttributeType_INT);
    a.set_i(*i);
  } else if (const auto* f = std::get_if<double>(&attribute.value)) {
    a.set_type(::onnx::AttributeProto_AttributeType_FLOAT);
    a.set_f(static_cast<float>(*f));
  } else if (const auto* s = std::get_if<std::string>(&attribute.value)) {
    a.set_type(::onnx::AttributeProto_AttributeType_STRING);
    a.set_s(*s);
  } else if (const auto* is = std::get_if<std::vector<int64_t>>(&attribute.value)) {
    a.set_type(::onnx::AttributeProto_AttributeType_INTS);
    for (const int64_t v : *is) a.add_ints(v);
  } else {
    a.set_type(::onnx::AttributeProto_AttributeType_FLOATS);
    for (const double v : std::get<std::vector<double>>(attribute.value)) a.add_floats(static_cast<float>(v));
  }
}

void set_value_info(::onnx::ValueInfoProto& v, const OnnxValueInfo& info) {
  v.set_name(info.name);
  auto* tensor = v.mutable_type()->mutable_tensor_type();
  tensor->set_elem_type(onnx_type(info.dtype));
  auto* shape = tensor->mutable_shape();
  for (const int64_t d : info.dims) {
    if (d < 0) {
      shape->add_dim()->set_dim_param(kBatchDim);
    } else {
      shape->add_dim()->set_dim_value(d);
    }
  }
}

// The initializer as a TensorProto; its bytes only when `with_data` (shape inference needs the
// dimensions alone, but the values of small ones, such as a Reshape's target shape).
void set_tensor(::onnx::TensorProto& p, const std::string& name, const torch::Tensor& t, bool with_data) {
  p.set_name(name);
  p.set_data_type(onnx_type(t.scalar_type()));
  for (const int64_t d : t.sizes()) p.add_dims(d);
  if (with_data || t.numel() <= 64) {
    p.set_raw_data(std::string(static_cast<const char*>(t.data_ptr()), t.nbytes()));  // little-endian hosts
  }
}

::onnx::ModelProto to_proto(const OnnxGraph& g, const OnnxModelInfo& info, bool with_data) {
  ::onnx::ModelProto m;
  m.set_ir_version(::onnx::IR_VERSION);
  m.set_producer_name("stoker");
  m.set_producer_version(info.producer_version);
  m.set_doc_string(info.doc);
  auto* opset = m.add_opset_import();
  opset->set_domain("");
  opset->set_version(info.opset);
  for (const auto& [key, value] : info.metadata) {
    auto* p = m.add_metadata_props();
    p->set_key(key);
    p->set_value(value);
  }
  ::onnx::GraphProto* graph = m.mutable_graph();
  graph->set_name(g.name);
  for (const OnnxNode& node : g.nodes) {
    ::onnx::NodeProto* n = graph->add_node();
    n->set_op_type(node.op);
    n->set_name(node.name);
    for (const std::string& in : node.inputs) n->add_input(in);
    for (const std::string& out : node.outputs) n->add_output(out);
    for (const OnnxAttribute& a : node.attributes) set_attribute(*n->add_attribute(), a);
  }
  for (const auto& [name, t] : g.initializers()) set_tensor(*graph->add_initializer(), name, t, with_data);
  for (const OnnxValueInfo& in : g.inputs) set_value_info(*graph->add_input(), in);
  for (const OnnxValueInfo& out : g.outputs) set_value_info(*graph->add_output(), out);
  return m;
}

std::vector<int64_t> dims_of(const ::onnx::TypeProto& type) {
  std::vector<int64_t> dims;
  if (!type.has_tensor_type() || !type.tensor_type().has_shape()) return dims;
  for (const auto& d : type.tensor_type().shape().dim()) dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
  return dims;
}

}  // namespace

int64_t onnx_element_type(torch::ScalarType type) { return onnx_type(type); }

int64_t onnx_max_opset() {
  return ::onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map().at(::onnx::ONNX_DOMAIN).second;
}

std::string serialize_onnx_model(const OnnxGraph& graph, const OnnxModelInfo& info) {
  ::onnx::ModelProto m = to_proto(graph, info, /*with_data=*/true);
  try {
    ::onnx::shape_inference::InferShapes(m, ::onnx::OpSchemaRegistry::Instance(),
                                       ::onnx::ShapeInferenceOptions(/*check_type=*/true, /*strict_mode=*/1));
  } catch (const std::exception& e) {
    STOKER_FAIL("the exported graph fails ONNX's shape inference (an exporter wrote a node wrong): {}", e.what());
  }
  try {
    ::onnx::checker::check_model(m);
  } catch (const std::exception& e) {
    STOKER_FAIL("the exported graph fails ONNX's checker (onnx::checker::check_model): {}", e.what());
  }
  const size_t bytes = m.ByteSizeLong();
  STOKER_CHECK(bytes <= static_cast<size_t>(std::numeric_limits<int32_t>::max()),
               "the exported model is {:.2f} GB, beyond protobuf's 2 GB limit for one file; export it with --dtype "
               "float16",
               static_cast<double>(bytes) / 1e9);
  std::string out;
  STOKER_CHECK(m.SerializeToString(&out), "protobuf could not serialise the exported model");
  return out;
}

std::map<std::string, std::vector<int64_t>> infer_onnx_shapes(const OnnxGraph& graph, int64_t opset) {
  OnnxModelInfo info;
  info.opset = opset;
  ::onnx::ModelProto m = to_proto(graph, info, /*with_data=*/false);
  try {
    ::onnx::shape_inference::InferShapes(m);
  } catch (const std::exception& e) {
    STOKER_FAIL("ONNX's shape inference failed on the graph exported so far: {}", e.what());
  }
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& t : m.graph().initializer()) out[t.name()] = std::vector<int64_t>(t.dims().begin(), t.dims().end());
  for (const auto& v : m.graph().input()) out[v.name()] = dims_of(v.type());
  for (const auto& v : m.graph().value_info()) out[v.name()] = dims_of(v.type());
  for (const auto& v : m.graph().output()) out[v.name()] = dims_of(v.type());
  return out;
}

int64_t OnnxModelSummary::count(const std::string& op) const {
  return static_cast<int64_t>(std::count(ops.begin(), ops.end(), op));
}

std::string OnnxModelSummary::metadata_value(const std::string& key) const {
  for (const auto& [k, v] : metadata) {
    if (k == key) return v;
  }
  return "";
}

OnnxModelSummary read_onnx_model(const std::string& bytes, const std::string& what) {
  ::onnx::ModelProto m;
  STOKER_CHECK(m.ParseFromString(bytes), "{} is not an ONNX model (protobuf cannot parse it)", what);
  try {
    ::onnx::checker::check_model(m);
  } catch (const std::exception& e) {
    STOKER_FAIL("{} fails ONNX's checker: {}", what, e.what());
  }
  OnnxModelSummary s;
  s.ir_version = m.ir_version();
  for (const auto& o : m.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") s.opset = o.version();
  }
  s.producer_name = m.producer_name();
  s.producer_version = m.producer_version();
  for (const auto& n : m.graph().node()) s.ops.push_back(n.op_type());
  auto info = [&](const ::onnx::ValueInfoProto& v) {
    OnnxValueInfo i{v.name(), torch_type(v.type().tensor_type().elem_type()), dims_of(v.type())};
    for (const auto& d : v.type().tensor_type().shape().dim()) {
      if (d.has_dim_param()) s.symbolic_dims.push_back(d.dim_param());
    }
    return i;
  };
  for (const auto& v : m.graph().input()) s.inputs.push_back(info(v));
  for (const auto& v : m.graph().output()) s.outputs.push_back(info(v));
  for (const auto& t : m.graph().initializer()) s.initializers.emplace_back(t.name(), torch_type(t.data_type()));
  for (const auto& p : m.metadata_props()) s.metadata.emplace_back(p.key(), p.value());
  return s;
}

}  // namespace stoker::models::onnx
