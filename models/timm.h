// The timm twin of each model type that has one (models/weights/timm_names.h): what model.pretrained
// needs to read a timm checkpoint into it, and `trainer export --format safetensors` to write one back.
// Each family defines its own beside its definition (resnet.cpp, convnext.cpp, vit.cpp,
// efficientnet.cpp, mobilenet_v3.cpp); timm_dialect asks them in turn.
//
//   model.type          timm architectures (config.json "architecture")
//   resnet18..101       resnet18, resnet34, resnet50, resnet101 (the same names)
//   convnext_tiny..base convnext_tiny, convnext_small, convnext_base
//   vit_b_16, b_32, l_16 vit_base_patch16_224 / _384, vit_base_patch32_224 / _384, vit_large_patch16_224 / _384
//   efficientnet_b0..b3 efficientnet_b0 .. efficientnet_b3
//   mobilenet_v3_small, _large  mobilenetv3_small_100, mobilenetv3_large_100 (with model.bn_eps: 1e-5)
// The configurable `vit` and `convnext` take the weights of any of their family's above (and of timm's
// smaller and larger standard sizes) when their own keys build the same shapes.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "models/weights/timm_names.h"

namespace stoker::models {

// The timm twin of `model_type`; nullopt when it has none.
std::optional<weights::TimmDialect> timm_dialect(const std::string& model_type);

// Each family's (nullopt for another type), defined in the family's file.
std::optional<weights::TimmDialect> resnet_timm(const std::string& model_type);
std::optional<weights::TimmDialect> convnext_timm(const std::string& model_type);
std::optional<weights::TimmDialect> vit_timm(const std::string& model_type);
std::optional<weights::TimmDialect> efficientnet_timm(const std::string& model_type);
std::optional<weights::TimmDialect> mobilenet_v3_timm(const std::string& model_type);

// timm's names inside torchvision-layout inverted-residual blocks (EfficientNet, MobileNetV3;
// mobile_blocks.cpp): for each of `keys` inside a block (`<prefix>block.<i>.<rest>`), the block's prefix
// ("features.3.0.") and timm's name within its block ("conv_pw.weight", "bn2.running_mean",
// "se.conv_reduce.bias"), after the block's layout: expanding (conv_pw, conv_dw, conv_pwl) or timm's
// depthwise-separable first block (conv_dw, conv_pw), with or without squeeze-and-excitation.
std::map<std::string, std::pair<std::string, std::string>> timm_mobile_block_parts(const std::vector<std::string>& keys);

}  // namespace stoker::models
