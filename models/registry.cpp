// The model registry (models/registry.h) and the registration of Stoker's own models.
#include "models/registry.h"

#include <torch/torch.h>

#include "common/error.h"

#include "models/blocks.h"
#include "models/cifar_resnet.h"
#include "models/compact_resnet.h"
#include "models/mlp.h"
#include "models/resnet.h"
#include "models/torchscript_model.h"

namespace stoker::models {
namespace nn = torch::nn;

namespace {

// A ResNet type built from the data's shape, with stochastic depth (ResNetOptions).
template <typename Module>
ModelType resnet_type(Module (*build)(int64_t num_classes, int64_t in_channels)) {
  return {options_of<ResNetOptions>(), [build](const TypeOptions& own, const ModelShape& s) {
            Module model = build(s.num_classes, s.in_channels);
            apply_drop_path(*model, dynamic_cast<const ResNetOptions&>(own).drop_path_rate);
            return nn::AnyModule(model);
          }};
}

void add_stoker_models(Registry<ModelType>& r) {
  r.add("compact_resnet", model_type<CompactResNetOptions>([](const CompactResNetOptions& o, const ModelShape& s) {
                            return CompactResNet(o, s);
                          })
                              .with_head({"classifier"})
                              .with_layers(compact_resnet_layer_groups()));
  r.add("mlp", model_type<MlpOptions>([](const MlpOptions& o, const ModelShape& s) { return Mlp(o, s); })
                   .with_head({"layers.classifier"})
                   .with_layers(mlp_layer_groups()));
  // torchvision-compatible ResNets (models/resnet.h) and CIFAR ResNets (models/cifar_resnet.h):
  // drop_path_rate their one key; the data gives in_channels and num_classes. Their head is `fc`, their
  // layers timm's ResNet.group_matcher's.
  const std::vector<std::string> fc = {"fc"};
  r.add("resnet18", resnet_type(&resnet18).with_head(fc).with_layers(resnet_layer_groups()));
  r.add("resnet34", resnet_type(&resnet34).with_head(fc).with_layers(resnet_layer_groups()));
  r.add("resnet50", resnet_type(&resnet50).with_head(fc).with_layers(resnet_layer_groups()));
  r.add("resnet101", resnet_type(&resnet101).with_head(fc).with_layers(resnet_layer_groups()));
  r.add("cifar_resnet20", resnet_type(&cifar_resnet20).with_head(fc).with_layers(resnet_layer_groups()));
  r.add("cifar_resnet56", resnet_type(&cifar_resnet56).with_head(fc).with_layers(resnet_layer_groups()));
  // Any network scripted in Python (models/torchscript_model.h): model.path; its head and layers are
  // its own keys (head_keys, layer_groups are unknown to the type).
  r.add("torchscript", torchscript_model_type());
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
