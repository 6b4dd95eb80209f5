// Which layer of a network each parameter belongs to, for layer-wise learning-rate decay
// (optimizer.layer_decay): a port of timm's group_matcher / group_with_matcher (timm 1.0,
// timm/models/_manipulate.py), so that the layers, and so the scales, equal timm's
// param_groups_layer_decay for the same model.
//
// A model type declares its groups beside its module (models/registry.h ModelType::layer_groups), in
// timm's words: an ordered list of named groups, each one or more regular expressions matched at the
// start of a parameter name (Python's re.match), whose captured numbers order the parameters within
// the group. The ResNets' is timm's ResNet.group_matcher(coarse=False):
//   {{"stem", {{"^conv1|bn1|maxpool"}}}, {"blocks", {{"^layer(\\d+)\\.(\\d+)"}}}}
// Each parameter gets the key (group ordinal, captured numbers..., suffix...); parameters no rule
// matches (the head) get the largest key. Sorted keys are numbered 0, 1, ...; a key ending in
// kMatchPrevious joins the layer before it (timm's MATCH_PREV_GROUP, e.g. a ViT's final norm with
// its last block).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stoker::models {

// timm's MATCH_PREV_GROUP: a rule whose suffix ends in it puts its parameters in the layer before.
inline constexpr double kMatchPrevious = 99999;

// One regular expression of a group (ECMAScript syntax, anchored at the start of the name), and the
// numbers appended to its key (timm's suffix tuple; empty: none).
struct LayerRule {
  std::string regex;
  std::vector<double> suffix = {};
};

struct LayerGroup {
  std::string name;  // "stem", "blocks": the log names the first and last layer by it
  std::vector<LayerRule> rules;
};

struct LayerAssignment {
  std::vector<int64_t> layer;  // by name, in the order given: 0 = the first layer (the stem)
  int64_t num_layers = 1;
  std::vector<std::string> layer_names;  // by layer: its group's name ("head" for the unmatched)
};

// The layer of each of `names` (parameter names in named_parameters order) under `groups`. With no
// groups every parameter is in one layer. Throws stoker::Error naming a rule whose regex does not
// compile.
LayerAssignment assign_layers(const std::vector<std::string>& names, const std::vector<LayerGroup>& groups);

}  // namespace stoker::models
