// Moving a module's weights between Stoker and Python: save_state_dict writes a file that
// Python's torch.load reads and load_state_dict(strict=True) accepts; load_state_dict reads
// torch.save(model.state_dict(), file). The file format itself is models/weights/torch_save.h.
//
// Keys are the module's dotted parameter and buffer names, in state_dict() order; Stoker's
// torchvision-layout ResNets (models/resnet.h) name theirs exactly as torchvision does, so weights
// move both ways.
#pragma once

#include <filesystem>

#include <torch/nn/module.h>

#include "models/weights/torch_save.h"

namespace stoker::models::weights {

// Every parameter and buffer of `model` under its dotted name, in torch's state_dict() order
// (module by module: its own parameters, then its own buffers).
NamedTensors state_of(torch::nn::Module& model);

// Writes every parameter and buffer of `model` (recursively, dotted names as in
// named_parameters/named_buffers) to `file` as one dict {name: tensor}, in the zip format of
// torch.save. Python reads it with plain `torch.load(file)` (weights_only=True, the default, works)
// and can pass it straight to `module.load_state_dict(...)`. Tensors are copied to the CPU first.
// Throws stoker::Error when the file cannot be written.
void save_state_dict(torch::nn::Module& model, const std::filesystem::path& file);

// Reads a dict {name: tensor} from `file` - one saved from Python with
// `torch.save(model.state_dict(), file)` or by save_state_dict - and copies it into `model`'s
// parameters and buffers (onto their devices and dtypes). Strict: every key of the model must be
// present with the same shape, and the file may hold no other keys. Throws stoker::Error naming the
// file and the offending key(s) otherwise; the model is left unchanged when it throws.
void load_state_dict(torch::nn::Module& model, const std::filesystem::path& file);

}  // namespace stoker::models::weights
