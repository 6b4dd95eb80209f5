// The model registry: each model type's own options and factory (ModelType), and the
// process-wide name -> type table with Stoker's own models in it (compact_resnet, mlp,
// cifar_resnet20/56, resnet18/34/50/101, vit_b_16/b_32/l_16, vit, convnext_tiny/small/base,
// convnext, efficientnet_b0..b3, mobilenet_v3_small/large; see the README's model table).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <torch/nn/modules/container/any.h>

#include "common/options.h"
#include "common/registry.h"
#include "models/layer_groups.h"
#include "models/pretrained.h"
#include "models/shape.h"

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
// to know of its parameters' names. A new family declares the last two beside its module, in one line
// each:
//   r.add("resnet18", resnet_type(&resnet18).with_head({"fc"}).with_layers(resnet_layer_groups()));
struct ModelType {
  OptionsMaker options = options_of<NoOptions>();
  ModelFactory create;
  ModelResolver resolve = nullptr;
  // Its classifier head, as key patterns (models/key_pattern.h; the ResNets: {"fc"}): re-initialised
  // when model.pretrained's head is for another number of classes, trained at optimizer.head_lr_scale.
  std::vector<std::string> head_keys = {};
  // Its layers for optimizer.layer_decay (models/layer_groups.h: timm's group_matcher); none: the
  // type cannot take layer_decay.
  std::vector<LayerGroup> layer_groups = {};
  // What model.pretrained's tensors need before they fit (models/pretrained.h; a ViT's position
  // embedding for another grid); null: nothing.
  PretrainedAdapter adapt_pretrained = nullptr;

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

// The process-wide model registry, with Stoker's own models already in it. Applications add theirs
// with `model_registry().add("my_net", model_type<MyOptions>(build))` and then select them with
// `model.type: my_net` (and set their keys beside it).
Registry<ModelType>& model_registry();

// The default options of a registered model type (what `model: {type: T}` reads as).
TypedOptions model_options(const std::string& type);

// Builds the model `model` describes (a registered type and its options) for data of `shape`.
torch::nn::AnyModule create_model(const TypedOptions& model, const ModelShape& shape);

// Fills the keys of `model` that data of `shape` decides (ModelType::resolve); nothing for the types
// without a resolver. The run plan calls it once the input shape is known.
void resolve_model_options(TypedOptions& model, const ModelShape& shape);

}  // namespace stoker::models
