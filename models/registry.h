// The model registry: each model type's own options and factory (ModelType), the process-wide
// name -> type table, and the process-wide ONNX exporter table. Both are filled on first use by the
// model families, each from its own file (FamilyRegistrar below; the families: CMakeLists.txt's
// STOKER_MODEL_FAMILIES; the model names: the README's model table).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/modules/container/any.h>

#include "common/options.h"
#include "common/registry.h"
#include "models/layer_groups.h"
#include "models/onnx/export.h"
#include "models/shape.h"
#include "models/weights/pretrained.h"

namespace stoker::models {

// Builds a model of a registered type from its own options (`model:` keys beside `type`) and the
// data's shape; the result is type-erased so that the Trainer can hold any module with a
// `forward(Tensor) -> Tensor`.
using ModelFactory = std::function<torch::nn::AnyModule(const TypeOptions&, const ModelShape&)>;

// Sets the keys of a type's options that the data decides where the user left them to it (a ViT's
// image_size from the input size), so that the resolved config, saved beside every checkpoint, builds
// the same model without the data (trainer predict, export).
using ModelResolver = std::function<void(TypeOptions&, const ModelShape&)>;

// A registered model type: its own options (their keys, defaults and checks), its factory, for types
// whose parameters depend on the input size its resolver (null otherwise), and what fine-tuning needs
// to know of its parameters' names. A family declares them in its own file, one line a name:
//   r.model("resnet18", resnet_type(&resnet18).with_head({"fc"}).with_layers(resnet_layer_groups()));
struct ModelType {
  OptionsMaker options = options_of<NoOptions>();
  ModelFactory create;
  ModelResolver resolve = nullptr;
  // Its classifier head, as key patterns (models/weights/key_pattern.h; the ResNets: {"fc"}): re-initialised
  // when model.pretrained's head is for another number of classes, trained at optimizer.head_lr_scale.
  std::vector<std::string> head_keys = {};
  // Its layers for optimizer.layer_decay (models/layer_groups.h: timm's group_matcher); none: the
  // type cannot take layer_decay.
  std::vector<LayerGroup> layer_groups = {};
  // What model.pretrained's tensors need before they fit (models/weights/pretrained.h; a ViT's position
  // embedding for another grid); null: nothing.
  weights::PretrainedAdapter adapt_pretrained = nullptr;

  ModelType with_head(std::vector<std::string> keys) const {
    ModelType t = *this;
    t.head_keys = std::move(keys);
    return t;
  }
  ModelType with_layers(std::vector<LayerGroup> groups) const {
    ModelType t = *this;
    t.layer_groups = std::move(groups);
    return t;
  }
};

// A ModelType whose factory takes its own options struct:
//   model_registry().add("bar_net", model_type<BarNetOptions>([](const BarNetOptions& o,
//                                                                const ModelShape& shape) {
//     return BarNet(shape.in_channels, o.filters, shape.num_classes);
//   }));
template <typename Options, typename Build>
ModelType model_type(Build build) {
  return {options_of<Options>(), [build](const TypeOptions& options, const ModelShape& shape) {
            return torch::nn::AnyModule(build(dynamic_cast<const Options&>(options), shape));
          }};
}

// What a model family registers, from its own file: its model types (names, defaults, head, layer
// groups) and its modules' ONNX exporters, in one function `void register_<family>(FamilyRegistrar&)`
// beside its definition. CMakeLists.txt lists the families (STOKER_MODEL_FAMILIES: a family's .cpp
// and its function's name) and writes the list the two registries below are filled from, so adding a
// family is its own files and one word there (docs/architecture.md). Each registry, when first used,
// calls every family's function with a registrar that keeps only its own half.
//   void register_bar_net(FamilyRegistrar& r) {
//     r.model("bar_net", model_type<BarNetOptions>(build_bar_net).with_head({"fc"}));
//     r.exporter<BarNetImpl>(&bar_net_to_onnx);
//   }
class FamilyRegistrar {
 public:
  FamilyRegistrar(Registry<ModelType>* models, Registry<onnx::OnnxExporter>* exporters)
      : models_(models), exporters_(exporters) {}

  void model(const std::string& name, ModelType type) {
    if (models_ != nullptr) models_->add(name, std::move(type));
  }
  // The exporter of modules of type `M` (the Impl class).
  template <typename M>
  void exporter(std::function<std::string(onnx::OnnxExport&, const M&, const std::string&)> exporter) {
    if (exporters_ != nullptr) onnx::add_onnx_exporter<M>(*exporters_, std::move(exporter));
  }

 private:
  Registry<ModelType>* models_;
  Registry<onnx::OnnxExporter>* exporters_;
};

// The process-wide model registry, with Stoker's own models already in it. Applications add theirs
// with `model_registry().add("my_net", model_type<MyOptions>(build))` and then select them with
// `model.type: my_net` (and set their keys beside it).
Registry<ModelType>& model_registry();

// The process-wide ONNX exporter registry (models/onnx/export.h), by module type, with every module
// type Stoker ships in it: libtorch's (models/onnx/nn.h) and each family's. An application adds its
// own module types' once, before `trainer export --format onnx` or export_onnx:
//   stoker::models::register_onnx_exporter<MyBlockImpl>(
//       [](onnx::OnnxExport& e, const MyBlockImpl& m, const std::string& x) { return e.op("Relu", {x}); });
//   std::string bytes = stoker::models::onnx::export_onnx(model, options, stoker::models::onnx_exporter_registry());
Registry<onnx::OnnxExporter>& onnx_exporter_registry();

// Registers `exporter` for modules of type `M` (the Impl class) in the process-wide registry; a
// second exporter for one type is refused.
template <typename M>
void register_onnx_exporter(std::function<std::string(onnx::OnnxExport&, const M&, const std::string&)> exporter) {
  onnx::add_onnx_exporter<M>(onnx_exporter_registry(), std::move(exporter));
}

// The default options of a registered model type (what `model: {type: T}` reads as).
TypedOptions model_options(const std::string& type);

// Builds the model `model` describes (a registered type and its options) for data of `shape`.
torch::nn::AnyModule create_model(const TypedOptions& model, const ModelShape& shape);

// Fills the keys of `model` that data of `shape` decides (ModelType::resolve); nothing for the types
// without a resolver. The run plan calls it once the input shape is known.
void resolve_model_options(TypedOptions& model, const ModelShape& shape);

}  // namespace stoker::models
