// The model registry (models/registry.h) and the registration of Stoker's own models.
#include "models/registry.h"

#include <torch/torch.h>

#include "common/error.h"

#include "models/blocks.h"
#include "models/cifar_resnet.h"
#include "models/compact_resnet.h"
#include "models/convnext.h"
#include "models/efficientnet.h"
#include "models/mlp.h"
#include "models/mobilenet_v3.h"
#include "models/resnet.h"
#include "models/torchscript_model.h"
#include "models/vit.h"

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

// An EfficientNet variant, its keys' defaults torchvision's for the variant (the classifier's dropout).
ModelType efficientnet_type(const std::string& name) {
  const EfficientNetVariant variant = efficientnet_variant(name);
  ModelType type = model_type<EfficientNetOptions>(
      [variant](const EfficientNetOptions& o, const ModelShape& s) { return EfficientNet(variant, o, s); });
  type.options = [variant] {
    auto options = std::make_unique<EfficientNetOptions>();
    options->dropout = variant.dropout;
    return options;
  };
  return type;
}

ModelType mobilenet_v3_type(MobileNetV3Size size) {
  return model_type<MobileNetV3Options>(
      [size](const MobileNetV3Options& o, const ModelShape& s) { return MobileNetV3(size, o, s); });
}

// A ViT type: torchvision's named architecture (VitOptions) or the configurable one (VitCustomOptions);
// its image_size resolved from a square input.
template <typename Options>
ModelType vit_type(const std::string& name) {
  ModelType type = model_type<Options>([name](const Options& o, const ModelShape& s) {
    VitConfig config = o.config;
    if (const std::optional<VitConfig> fixed = named_vit(name)) {
      config = *fixed;
      config.image_size = o.config.image_size;
      config.dropout = o.config.dropout;
      config.attention_dropout = o.config.attention_dropout;
      config.drop_path_rate = o.config.drop_path_rate;
    }
    config.name = name;
    return VisionTransformer(config, s);
  });
  type.resolve = [](TypeOptions& own, const ModelShape& s) {
    int64_t& image_size = dynamic_cast<Options&>(own).config.image_size;
    if (image_size == 0 && s.height > 0 && s.height == s.width) image_size = s.height;
  };
  // model.pretrained for another input size: its position embedding resized to the model's grid.
  type.adapt_pretrained = resize_pretrained_position_embedding;
  return type;
}

// A ConvNeXt type: torchvision's named architecture (ConvNextOptions) or the configurable one.
template <typename Options>
ModelType convnext_type(const std::string& name) {
  return model_type<Options>([name](const Options& o, const ModelShape& s) {
    ConvNextConfig config = o.config;
    if (const std::optional<ConvNextConfig> fixed = named_convnext(name)) {
      config = *fixed;
      config.drop_path_rate = o.config.drop_path_rate;
      config.layer_scale = o.config.layer_scale;
    }
    config.name = name;
    return ConvNext(config, s);
  });
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
  // torchvision-compatible EfficientNet-B0..B3 and MobileNetV3 (models/efficientnet.h,
  // models/mobilenet_v3.h): drop_path_rate and dropout their keys; their head is `classifier`.
  const std::vector<std::string> classifier = {"classifier"};
  for (const char* name : {"efficientnet_b0", "efficientnet_b1", "efficientnet_b2", "efficientnet_b3"}) {
    r.add(name, efficientnet_type(name).with_head(classifier).with_layers(efficientnet_layer_groups()));
  }
  for (const auto& [name, size] : {std::pair{"mobilenet_v3_small", MobileNetV3Size::kSmall},
                                   std::pair{"mobilenet_v3_large", MobileNetV3Size::kLarge}}) {
    r.add(name, mobilenet_v3_type(size).with_head(classifier).with_layers(mobilenet_v3_layer_groups()));
  }
  // torchvision-compatible ViTs (models/vit.h) and ConvNeXts (models/convnext.h), named and configurable;
  // a ViT's head is `heads`, a ConvNeXt's `classifier` (its last norm and linear).
  for (const char* name : {"vit_b_16", "vit_b_32", "vit_l_16"}) {
    r.add(name, vit_type<VitOptions>(name).with_head({"heads"}).with_layers(vit_layer_groups()));
  }
  r.add("vit", vit_type<VitCustomOptions>("vit").with_head({"heads"}).with_layers(vit_layer_groups()));
  for (const char* name : {"convnext_tiny", "convnext_small", "convnext_base"}) {
    r.add(name, convnext_type<ConvNextOptions>(name).with_head(classifier).with_layers(convnext_layer_groups()));
  }
  r.add("convnext",
        convnext_type<ConvNextCustomOptions>("convnext").with_head(classifier).with_layers(convnext_layer_groups()));
  // Any network scripted in Python (models/torchscript_model.h): model.path; its head and layers are
  // its own keys (head_keys, layer_groups are unknown to the type).
  r.add("torchscript", model_type<TorchScriptOptions>([](const TorchScriptOptions& o, const ModelShape& shape) {
          o.check();
          return TorchScriptModel(o.path, shape.num_classes);
        }));
}

}  // namespace

Registry<ModelType>& model_registry() { return lazy_registry<ModelType, add_stoker_models>("model"); }

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
