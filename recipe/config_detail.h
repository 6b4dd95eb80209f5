// The config's cross-key checks of the keys the fine-tuning and distributed issues added (recipe/config.cpp's
// private header; recipe/cross_key_checks.cpp defines them): model.pretrained*,
// model.freeze*, optimizer.layer_decay and head_lr_scale against the model type; the distributed: section,
// model.activation_checkpointing and their combinations with the rest. recipe/config.cpp's
// check_consistency runs them with the rest at load time; `fail` throws naming the file.
#pragma once

#include <functional>
#include <string>

#include "recipe/config.h"

namespace stoker {

using ConfigFail = std::function<void(const std::string&)>;

void check_finetuning_keys(const Config& c, const ConfigFail& fail);
void check_distributed_keys(const Config& c, const ConfigFail& fail);

}  // namespace stoker
