// model.pretrained in a run: reading a weights file whatever it is — a torch.save state dict as
// torchvision, timm and Lightning write it (or a training checkpoint holding one under state_dict,
// model or module), a .safetensors file (the Hugging Face hub's), a Stoker checkpoint — and fitting
// it into the freshly built model (models/weights/pretrained.h: renames, skips, the re-initialised head).
// A run resumed from a checkpoint never reads it: the checkpoint holds the weights (RunPlan::resuming).
//
//   model:
//     type: resnet50
//     pretrained: weights/resnet50-11ad3fa6.pth   # torchvision's, 1000 classes
//   data: {num_classes: 10, ...}
//   -> "model.pretrained: weights/resnet50-11ad3fa6.pth (318 tensors; head fc re-initialised for 10 classes)"
#pragma once

#include <filesystem>
#include <string>

#include <torch/nn/module.h>

#include "models/weights/torch_save.h"
#include "recipe/config.h"

namespace stoker {

// The named tensors of a weights file (any of the formats above), on the CPU. A file of any other
// kind (a YAML, an image, a TorchScript network, a half-written .pt, torch.save's pre-1.6 format, a
// pickled module) is an error naming the file, what it is and what to give instead.
models::weights::NamedTensors read_weights_file(const std::filesystem::path& file);

// The state dict inside a torch.save file's object (read leniently: models/weights/torch_save.h): the dict
// itself when its values are tensors, else the dict of tensors under state_dict, model_state_dict,
// model, module, net or network. `file` names it in errors.
models::weights::NamedTensors find_state_dict(const c10::IValue& value, const std::string& file);

// model.pretrained's config.json pretrained_cfg (a Hub folder or hf: entry) as the defaults of data.mean and
// data.std: where the recipe left both at their defaults ([0] and [1]) and the data has as many channels as
// the weights' mean, they become the weights' (one log line says so). What the recipe sets stays, and
// load_pretrained warns once that it differs. Nothing for another file, or when the entry is not there.
void apply_pretrained_cfg(Config& config, int64_t channels);

// Loads config.pretrained into `model` (as make_model built it: on the CPU, in float32) and returns
// the line the run logs: "model.pretrained: FILE (N tensors; head fc re-initialised for 10 classes)".
std::string load_pretrained(torch::nn::Module& model, const Config& config);

}  // namespace stoker
