// timm's names for the tensors of Stoker's (torchvision-named) families: the "timm" dialect that
// model.pretrained reads and `trainer export --format safetensors` writes.
//
// timm (PyTorch Image Models) and torchvision build the same ResNets, ConvNeXts, ViTs, EfficientNets
// and MobileNetV3s with other module names (`stem.0` for `features.0.0`, `blocks.N.attn.qkv` for
// `encoder.layers.encoder_layer_N.self_attention.in_proj`) and, in two places, other shapes (ConvNeXt's
// layer scale [C] against [C, 1, 1]; MobileNetV3's last 1x1 convolution against a linear layer). A family
// describes its twin with a TimmDialect (models/timm.h has them by model type): timm's name of each of the
// model's keys. Only that direction is written; reading a timm file inverts it over the model's own keys,
// so that the two directions cannot disagree and a file key that names nothing is reported as it is.
//
// Names alone do not make weights fit: timm's MobileNetV3 normalises with batch-norm eps 1e-5 where
// torchvision's uses 1e-3, and timm's tf_* ports pad as TensorFlow does. What the names cannot show is
// checked here (timm_numerics_differ, check_timm_architecture) and refused with the difference named.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>

#include "models/weights/torch_save.h"

namespace stoker::models::weights {

// How a tensor's shape differs between the model's module and timm's.
enum class TimmReshape {
  kSame,
  kVector,   // the model's [C, 1, 1] (ConvNeXt's layer_scale) is timm's [C] (gamma)
  kConv1x1,  // the model's [O, I] (a Linear) is timm's [O, I, 1, 1] (MobileNetV3's conv_head)
};

struct TimmName {
  std::string name;  // timm's key
  TimmReshape reshape = TimmReshape::kSame;
};

// timm's name of each of `keys` (a model's state-dict keys), in their order.
using TimmNamer = std::function<std::vector<TimmName>(const std::vector<std::string>& keys)>;

// A model type's timm twin.
struct TimmDialect {
  std::string timm_family;                 // "ResNet", "MobileNetV3": timm's class, for messages
  std::vector<std::string> architectures;  // timm's architectures whose weights fit (config.json "architecture")
  TimmNamer names;                         // null: timm's names are the model's (the ResNets)
  double bn_eps = 0;                       // timm's batch-norm eps for these architectures; 0: none
  std::string bn_eps_key;                  // the model key that sets the model's ("bn_eps"); "": none
  std::string global_pool = "avg";         // timm's pooling the model computes ("token": a ViT's class token)
  std::vector<std::string> shape_args;     // config.json model_args that the tensors' shapes show (the fit checks them)
  // A model_args entry the shapes do not show: "" when `value` (JSON) is what the model computes, else why not.
  // Null: every such entry is refused.
  std::function<std::string(const torch::nn::Module& model, const std::string& key, const std::string& value)> check_arg;
};

// A dialect with the rest of its fields at their defaults.
TimmDialect make_timm_dialect(std::string timm_family, std::vector<std::string> architectures, TimmNamer names,
                              double bn_eps = 0, std::string bn_eps_key = "");

// A namer from rules (regular expression over the model's key, timm's name with $1, $2 for its groups):
// the first rule that matches a whole key names it; a key no rule matches keeps its name.
struct TimmRule {
  std::string pattern, timm;
  TimmReshape reshape = TimmReshape::kSame;
};
TimmNamer timm_rules(const std::vector<TimmRule>& rules);

// The model's keys with their timm names. Throws when two keys get one name (a namer's bug).
std::vector<std::pair<std::string, TimmName>> timm_key_map(const TimmDialect& dialect,
                                                           const std::vector<std::string>& model_keys);

// Whether `file` names its tensors as timm does, not as the model does: more of its keys are timm names
// of the model's keys than are the model's own keys. False when the two namings are one (the ResNets).
bool names_are_timms(const TimmDialect& dialect, const std::vector<std::string>& model_keys, const NamedTensors& file);

// Renames `tensors` from timm's names to the model's, reshaped where the two differ (a tensor already of
// the model's shape, or of neither, is left to the fit to judge). Keys that are no timm name of a model
// key are kept as they are, so that the fit names them.
void from_timm_names(const TimmDialect& dialect, const std::vector<std::string>& model_keys, NamedTensors& tensors);

// The model's tensors (state_of(model)) under timm's names and in timm's shapes, in the model's order:
// what timm's load_state_dict(strict=True) takes.
NamedTensors to_timm_names(const TimmDialect& dialect, const NamedTensors& state);

// "" when `model` computes as timm's twin does with the same weights; otherwise the sentence that names
// the difference and how to match it (a batch-norm eps and its model key). `what`: "model.type X".
std::string timm_numerics_differ(const TimmDialect& dialect, const torch::nn::Module& model, const std::string& what);

// Refuses config.json's model_args (key, JSON value) that make timm's network compute otherwise than `model`:
// those that change nothing (num_classes, in_chans, img_size, drop rates, dynamic_img_size), the dialect's
// pooling, shape_args and what check_arg accepts pass.
void check_timm_model_args(const TimmDialect& dialect, const torch::nn::Module& model,
                           const std::vector<std::pair<std::string, std::string>>& args, const std::string& source,
                           const std::string& what);

// Refuses a timm architecture (config.json's "architecture") that is not one of the dialect's, naming
// what differs where it is known (tf_* ports: TensorFlow's padding and eps; resnet*d: a deep stem).
void check_timm_architecture(const TimmDialect& dialect, const std::string& architecture, const std::string& source,
                             const std::string& what);

}  // namespace stoker::models::weights
