// ONNX export of a module tree (models/onnx/export.h): the context exporters write through, and
// export_onnx.
#include "models/onnx/export.h"

#include <c10/util/Type.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include "common/error.h"
#include "models/onnx/proto.h"

namespace stoker::models::onnx {
namespace {

// Puts a module back in the mode it had, whatever happens.
class EvalModeGuard {
 public:
  explicit EvalModeGuard(torch::nn::Module& m) : module_(m), training_(m.is_training()) { m.eval(); }
  ~EvalModeGuard() { module_.train(training_); }
  EvalModeGuard(const EvalModeGuard&) = delete;
  EvalModeGuard& operator=(const EvalModeGuard&) = delete;

 private:
  torch::nn::Module& module_;
  bool training_;
};

void check_options(const OnnxExportOptions& o) {
  const int64_t newest = onnx_max_opset();
  STOKER_CHECK(o.opset >= 13 && o.opset <= newest,
               "ONNX opset {} is outside what Stoker writes: 13 to {} (the newest the linked ONNX library, "
               "libonnx-dev, knows)",
               o.opset, newest);
  STOKER_CHECK(o.input_chw.size() == 3 && o.input_chw[0] > 0 && o.input_chw[1] > 0 && o.input_chw[2] > 0,
               "the ONNX export needs the input's channels, height and width");
  STOKER_CHECK(o.dtype == torch::kFloat32 || o.dtype == torch::kFloat16,
               "the ONNX export writes float32 or float16 weights, not {}", c10::toString(o.dtype));
  STOKER_CHECK(o.mean.size() == o.std.size() && (o.mean.empty() || static_cast<int64_t>(o.mean.size()) == o.input_chw[0]),
               "the input normalisation needs one mean and one std per input channel ({}), got {} and {}",
               o.input_chw[0], o.mean.size(), o.std.size());
  STOKER_CHECK(o.batch >= 1, "the ONNX export's batch size must be at least 1, got {}", o.batch);
}

// (x - mean) / std with float32 constants of shape [1, C, 1, 1], which `keep` then names (they stay
// float32 in a float16 export, whose cast comes after them).
std::string normalize(OnnxGraph& g, const OnnxExportOptions& o, const std::string& x, std::set<std::string>& keep) {
  auto constant = [&](const char* name, const std::vector<double>& values) {
    const torch::Tensor t = torch::tensor(values, torch::kFloat64).to(torch::kFloat32).view({1, -1, 1, 1});
    const std::string n = g.add_initializer(fmt::format("normalize.{}", name), t);
    keep.insert(n);
    return n;
  };
  const std::string mean = constant("mean", o.mean), std = constant("std", o.std);
  return g.add_node("Div", "normalize/Div", {g.add_node("Sub", "normalize/Sub", {x, mean}), std});
}

}  // namespace

std::string onnx_module_type(const std::type_info& type) { return c10::demangle(type.name()); }

OnnxExport::OnnxExport(OnnxGraph& graph, const Registry<OnnxExporter>& exporters, int64_t opset, std::string what)
    : graph_(graph), exporters_(exporters), opset_(opset), what_(std::move(what)) {}

bool OnnxExport::has_child(const torch::nn::Module& parent, const std::string& name) const {
  return parent.named_children().find(name) != nullptr;
}

std::string OnnxExport::child(const torch::nn::Module& parent, const std::string& name, const std::string& input) {
  const auto children = parent.named_children();
  const std::shared_ptr<torch::nn::Module>* found = children.find(name);
  STOKER_CHECK(found != nullptr, "{}: the ONNX exporter of {} ({}) asks for its child '{}', which it does not have",
               what_, path_.empty() ? "the model" : path_, onnx_module_type(parent), name);
  return module(**found, path_.empty() ? name : path_ + "." + name, input);
}

std::string OnnxExport::children(const torch::nn::Module& parent, const std::string& input) {
  std::string x = input;
  for (const auto& c : parent.named_children()) x = child(parent, c.key(), x);
  return x;
}

std::string OnnxExport::module(const torch::nn::Module& m, const std::string& path, const std::string& input) {
  const std::string type = onnx_module_type(m);
  if (!exporters_.contains(type)) {
    STOKER_FAIL("{}: {} is a {}, which has no ONNX exporter. Register one before exporting, as Stoker does for its "
                "own modules: stoker::models::register_onnx_exporter<{}>(exporter) (docs/trainer.md, \"Adding an "
                "ONNX exporter\"); or export --format torchscript, which traces any module",
                what_, path.empty() ? "the model" : "its module '" + path + "'", type, type);
  }
  const OnnxExporter exporter = exporters_.get(type);
  const std::string outer_path = path_;
  const torch::nn::Module* outer = current_;
  path_ = path;
  current_ = &m;
  try {
    std::string out = exporter(*this, m, input);
    path_ = outer_path;
    current_ = outer;
    return out;
  } catch (...) {
    path_ = outer_path;
    current_ = outer;
    throw;
  }
}

std::string OnnxExport::param(const std::string& name) {
  const torch::nn::Module& m = *current_;
  const auto parameters = m.named_parameters(/*recurse=*/false), buffers = m.named_buffers(/*recurse=*/false);
  const torch::Tensor* t = parameters.find(name);
  if (t == nullptr) t = buffers.find(name);
  STOKER_CHECK(t != nullptr && t->defined(), "{}: the ONNX exporter of {} ({}) asks for its tensor '{}', which it does not have",
               what_, path_.empty() ? "the model" : path_, onnx_module_type(m), name);
  const void* key = t->unsafeGetTensorImpl();
  for (const auto& [impl, initializer] : params_) {
    if (impl == key) return initializer;
  }
  const std::string initializer = graph_.add_initializer(path_.empty() ? name : path_ + "." + name, *t);
  params_.emplace_back(key, initializer);
  return initializer;
}

std::string OnnxExport::constant(const std::string& name, const torch::Tensor& value) {
  return graph_.add_initializer(path_.empty() ? name : path_ + "." + name, value);
}

std::string OnnxExport::op(const std::string& op, std::vector<std::string> inputs, std::vector<OnnxAttribute> attributes) {
  return graph_.add_node(op, path_.empty() ? op : path_ + "/" + op, std::move(inputs), std::move(attributes));
}

std::vector<int64_t> OnnxExport::shape(const std::string& name) {
  const auto shapes = infer_onnx_shapes(graph_, opset_);
  const auto it = shapes.find(name);
  STOKER_CHECK(it != shapes.end(), "{}: ONNX's shape inference cannot tell the shape of '{}' (in {})", what_, name,
               path_.empty() ? "the model" : path_);
  return it->second;
}

std::string export_onnx(torch::nn::Module& model, const OnnxExportOptions& o, const Registry<OnnxExporter>& exporters,
                        int64_t* folded) {
  check_options(o);
  EvalModeGuard eval(model);
  torch::NoGradGuard no_grad;
  OnnxGraph g;
  g.name = o.what;
  const int64_t batch = o.dynamic_batch ? -1 : o.batch;
  std::string x = g.fresh_name(o.input_name);
  g.inputs.push_back({x, torch::kFloat32, {batch, o.input_chw[0], o.input_chw[1], o.input_chw[2]}});
  std::set<std::string> keep_float32;
  if (!o.mean.empty()) x = normalize(g, o, x, keep_float32);
  if (o.dtype == torch::kFloat16) x = g.add_node("Cast", "input/Cast", {x}, {{"to", onnx_element_type(torch::kFloat16)}});
  OnnxExport e(g, exporters, o.opset, o.what);
  std::string y = e.module(model, "", x);
  if (o.dtype == torch::kFloat16) y = g.add_node("Cast", "output/Cast", {y}, {{"to", onnx_element_type(torch::kFloat32)}});
  if (g.producer(y) < 0) y = g.add_node("Identity", "output/Identity", {y});  // the input or a weight itself
  const std::vector<int64_t> dims = e.shape(y);
  const std::string output = g.fresh_name(o.output_name);
  STOKER_CHECK(output == o.output_name, "{}: the output's name '{}' is taken by a node of the graph; pick another",
               o.what, o.output_name);
  g.rename_value(y, output);
  STOKER_CHECK(dims.size() == 2 && dims[0] == batch && (o.num_classes <= 0 || dims[1] == o.num_classes),
               "{}: its exported graph gives outputs of shape [{}] where [{}, {}] was expected", o.what,
               fmt::join(dims, ", "), o.dynamic_batch ? "batch" : std::to_string(batch), o.num_classes);
  g.outputs.push_back({o.output_name, torch::kFloat32, dims});
  const int64_t n = fold_batch_norms(g);
  if (folded != nullptr) *folded = n;
  if (o.dtype == torch::kFloat16) to_float16(g, keep_float32);
  OnnxModelInfo info;
  info.opset = o.opset;
  info.producer_version = o.producer_version;
  info.doc = o.doc;
  info.metadata = o.metadata;
  return serialize_onnx_model(g, info);
}

}  // namespace stoker::models::onnx
