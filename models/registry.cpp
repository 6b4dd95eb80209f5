// The model registry (models/registry.h) and the registration of Stoker's own models.
#include "models/registry.h"

#include <torch/torch.h>

#include "common/error.h"

#include "models/cifar_resnet.h"
#include "models/compact_resnet.h"
#include "models/mlp.h"
#include "models/resnet.h"

namespace stoker::models {
namespace nn = torch::nn;

namespace {

// A model type whose only inputs are the data's shape.
template <typename Module>
ModelType shape_only(Module (*build)(int64_t num_classes, int64_t in_channels)) {
  return {options_of<NoOptions>(), [build](const TypeOptions&, const ModelShape& s) {
            return nn::AnyModule(build(s.num_classes, s.in_channels));
          }};
}

void add_stoker_models(Registry<ModelType>& r) {
  r.add("compact_resnet", model_type<CompactResNetOptions>([](const CompactResNetOptions& o, const ModelShape& s) {
          return CompactResNet(o, s);
        }));
  r.add("mlp", model_type<MlpOptions>([](const MlpOptions& o, const ModelShape& s) { return Mlp(o, s); }));
  // torchvision-compatible ResNets (models/resnet.h) and CIFAR ResNets (models/cifar_resnet.h):
  // no keys of their own; the data gives in_channels and num_classes.
  r.add("resnet18", shape_only(&resnet18));
  r.add("resnet34", shape_only(&resnet34));
  r.add("resnet50", shape_only(&resnet50));
  r.add("resnet101", shape_only(&resnet101));
  r.add("cifar_resnet20", shape_only(&cifar_resnet20));
  r.add("cifar_resnet56", shape_only(&cifar_resnet56));
}

}  // namespace

Registry<ModelType>& model_registry() {
  // Built on first use (never destroyed), so that applications may register from static
  // initialisers in any order.
  static Registry<ModelType>* registry = [] {
    auto* r = new Registry<ModelType>("model");
    add_stoker_models(*r);
    return r;
  }();
  return *registry;
}

TypedOptions model_options(const std::string& type) {
  return TypedOptions(type, model_registry().get(type).options());
}

torch::nn::AnyModule create_model(const TypedOptions& model, const ModelShape& shape) {
  const ModelType type = model_registry().get(model.type());
  if (model.type().empty()) STOKER_FAIL("the model has no type; give model.type");
  return type.create(model.options(), shape);
}

}  // namespace stoker::models
