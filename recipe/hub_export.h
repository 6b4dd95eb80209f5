// `trainer export --format safetensors` (recipe/export.h): the weights as a .safetensors file that
// timm's and torchvision's load_state_dict(strict=True) read (Python's safetensors.torch.load_file), in
// timm's names when the run started from timm's weights (model.pretrained a Hub folder or hf: entry whose
// config.json names a timm architecture: models/weights/hub.h), else in the model's (torchvision's) names.
// A timm-named file named model.safetensors gets a config.json beside it in the Hub's layout
// (architecture, num_classes, label_names, pretrained_cfg with the run's mean, std and input size), so that
// the folder can be pushed to the Hub as it is and timm.create_model("hf-hub:ORG/NAME") builds it.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>

#include "recipe/config.h"

namespace stoker {

struct HubExport {
  std::string summary;             // "safetensors, timm's names (resnet50)"
  std::filesystem::path config;    // config.json written beside it; empty: none
};

// Writes `model`'s weights to `output` as described above. `class_names`: the run's, one per class (the
// label names; where they are only indices and the run kept the weights' head, config.json's label_names
// stay); `size`: the input height and width when known.
HubExport write_safetensors_export(torch::nn::Module& model, const Config& config,
                                   const std::vector<std::string>& class_names,
                                   const std::optional<std::pair<int64_t, int64_t>>& size,
                                   const std::filesystem::path& output);

}  // namespace stoker
