// The optimizer's parameter groups of a run, from its config and the model type: which parameters
// train (model.freeze: frozen for good ones are left out, those frozen until an epoch stay in their
// groups without gradients), their layers (the type's layer groups, for optimizer.layer_decay) and
// head (optimizer.head_lr_scale), grouped by optim/optim.h plan_param_groups; and the one line the
// run logs about them, counted, not listed:
//   optimizer: 62 tensors (11.2M parameters) in 20 groups, lr 0.000422 (stem) .. 0.01 (head); 8 frozen
//   until epoch 3
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include "optim/optim.h"
#include "recipe/config.h"

namespace stoker {

struct RunParameters {
  std::vector<ParamGroupSpec> groups;  // what make_optimizer builds the optimizer over
  int64_t frozen = 0;                  // parameter tensors model.freeze matches
  int64_t left_out = 0;                // of them, left out of the optimizer (frozen for good)
};

// The groups for `model` (as the config's model type builds it). Freezes nothing itself (make_parts
// does, before building the optimizer); model.freeze patterns that match no parameter are an error.
RunParameters run_parameters(const Config& config, torch::nn::Module& model);

// The line above for the groups of `model`, the schedule's learning rate being `lr`.
std::string describe_parameters(const Config& config, torch::nn::Module& model, double lr);

}  // namespace stoker
