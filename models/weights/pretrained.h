// Starting a model from weights trained elsewhere (model.pretrained): fitting a file's named tensors
// into a freshly built model, as timm's load_pretrained / load_checkpoint and Lightning do, with the
// renames and skips other naming schemes need, and a classifier re-initialised when it was trained
// for another number of classes. Reading the file (torch.save, safetensors, a Stoker checkpoint) is
// the recipe layer's (recipe/pretrained.h); this file knows only names, shapes and the model.
//
// The order: prefixes that wrappers add to every key are removed (`module.` from DDP, `model.` from
// Lightning, `_orig_mod.` from torch.compile; only when every key has them and the model has no such
// module), then model.pretrained_rename's prefixes are replaced (the longest that matches), then keys
// matching model.pretrained_skip are left out (and the model's keys they match stay as built). Then
// every model key must be in the file with its shape and every file key in the model, except:
//   - the head (the model type's head keys): a tensor that differs only in its first dimension (the
//     classes) is left as built, i.e. re-initialised, and so is a head the file lacks;
//   - BatchNorm's num_batches_tracked, which older files lack (torch.nn does the same).
// Anything else is one error naming the source and every problem (ten shown, then a count); the
// model is unchanged when it throws.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include "common/options.h"
#include "models/weights/torch_save.h"

namespace stoker::models::weights {

// model.pretrained, model.pretrained_skip, model.pretrained_rename.
struct PretrainedOptions {
  std::string file;                // empty: no pretrained weights
  std::vector<std::string> skip;   // key patterns (models/weights/key_pattern.h) left as built
  StringPairs rename;              // prefix -> prefix, e.g. {"backbone.", ""}
};

struct PretrainedFit {
  int64_t loaded = 0;                       // tensors copied into the model
  std::vector<std::string> reinitialised;   // head keys left as built (another number of classes, or absent)
  std::vector<std::string> skipped;         // model keys left as built by model.pretrained_skip
  std::vector<std::string> stripped;        // wrapper prefixes removed from every key ("module.")
  // The head's modules ("fc") named once each, for the log: "head fc re-initialised for 10 classes".
  std::vector<std::string> head_modules() const;
};

// What a model type does to a file's tensors, named as the model names them (after the wrapper prefixes
// and renames), before they are fitted: a ViT resizes a position embedding made for another grid.
using PretrainedAdapter = std::function<void(const torch::nn::Module& model, NamedTensors& tensors)>;

// Copies `tensors` into `model` as described above, after `adapt` (when given). `source` names the file
// and `what` the model ("model.type resnet50") in errors.
PretrainedFit fit_pretrained(torch::nn::Module& model, NamedTensors tensors, const PretrainedOptions& options,
                             const std::vector<std::string>& head_keys, const std::string& source,
                             const std::string& what, const PretrainedAdapter& adapt = nullptr);

}  // namespace stoker::models::weights
