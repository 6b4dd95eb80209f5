// The model and ONNX exporter registries (models/registry.h), filled by the model families: each
// family's function register_<family>, defined in its own file, is declared and called here from the
// list CMakeLists.txt writes (STOKER_MODEL_FAMILIES -> build/generated/models/families.inc, one
// STOKER_MODEL_FAMILY(<family>) line each). Calling every function by name, rather than letting each
// file register itself from a static initialiser, keeps every family linked from the static library
// and the registries' contents independent of the order of static initialisation.
#include "models/registry.h"

#include <torch/torch.h>

#include "common/error.h"
#include "models/onnx/nn.h"

namespace stoker::models {

#define STOKER_MODEL_FAMILY(family) void register_##family(FamilyRegistrar& r);
#include "models/families.inc"
#undef STOKER_MODEL_FAMILY

namespace {

void register_families(FamilyRegistrar r) {
#define STOKER_MODEL_FAMILY(family) register_##family(r);
#include "models/families.inc"
#undef STOKER_MODEL_FAMILY
}

void add_stoker_models(Registry<ModelType>& r) { register_families(FamilyRegistrar(&r, nullptr)); }

// libtorch's modules first (they cannot sit beside their modules), then each family's.
void add_stoker_exporters(Registry<onnx::OnnxExporter>& r) {
  onnx::add_torch_nn_exporters(r);
  register_families(FamilyRegistrar(nullptr, &r));
}

}  // namespace

Registry<ModelType>& model_registry() { return lazy_registry<ModelType, add_stoker_models>("model"); }

Registry<onnx::OnnxExporter>& onnx_exporter_registry() {
  return lazy_registry<onnx::OnnxExporter, add_stoker_exporters>("ONNX exporter");
}

TypedOptions model_options(const std::string& type) {
  return TypedOptions(type, model_registry().get(type).options());
}

torch::nn::AnyModule create_model(const TypedOptions& model, const ModelShape& shape) {
  const ModelType type = model_registry().get(model.type());
  if (model.type().empty()) STOKER_FAIL("the model has no type; give model.type");
  return type.create(model.options(), shape);
}

void resolve_model_options(TypedOptions& model, const ModelShape& shape) {
  const ModelType type = model_registry().get(model.type());
  if (type.resolve) type.resolve(model.options(), shape);
}

}  // namespace stoker::models
