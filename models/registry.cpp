// The model registry (models/registry.h) and the registration of Stoker's own models.
#include "models/registry.h"

#include <torch/torch.h>

#include "models/cifar_resnet.h"
#include "models/compact_resnet.h"
#include "models/resnet.h"

namespace stoker::models {
namespace nn = torch::nn;

namespace {
void add_stoker_models(Registry<ModelFactory>& r) {
  r.add("compact_resnet", [](const ModelSpec& spec) { return nn::AnyModule(CompactResNet(spec)); });
  // torchvision-compatible ResNets (models/resnet.h): only in_channels and num_classes matter.
  r.add("resnet18",
        [](const ModelSpec& s) { return nn::AnyModule(resnet18(s.num_classes, s.in_channels)); });
  r.add("resnet34",
        [](const ModelSpec& s) { return nn::AnyModule(resnet34(s.num_classes, s.in_channels)); });
  r.add("resnet50",
        [](const ModelSpec& s) { return nn::AnyModule(resnet50(s.num_classes, s.in_channels)); });
  r.add("resnet101",
        [](const ModelSpec& s) { return nn::AnyModule(resnet101(s.num_classes, s.in_channels)); });
  // CIFAR-style ResNets (models/cifar_resnet.h): only in_channels and num_classes matter.
  r.add("cifar_resnet20", [](const ModelSpec& s) {
    return nn::AnyModule(cifar_resnet20(s.num_classes, s.in_channels));
  });
  r.add("cifar_resnet56", [](const ModelSpec& s) {
    return nn::AnyModule(cifar_resnet56(s.num_classes, s.in_channels));
  });
}
}  // namespace

Registry<ModelFactory>& model_registry() {
  // Built on first use (never destroyed), so that applications may register from static
  // initialisers in any order.
  static Registry<ModelFactory>* registry = [] {
    auto* r = new Registry<ModelFactory>("model");
    add_stoker_models(*r);
    return r;
  }();
  return *registry;
}

torch::nn::AnyModule create_model(const ModelSpec& spec) {
  return model_registry().get(spec.type)(spec);
}

}  // namespace stoker::models
