// Layers of a network for layer-wise learning-rate decay (models/layer_groups.h).
#include "models/layer_groups.h"

#include <algorithm>
#include <limits>
#include <map>
#include <regex>

#include "common/error.h"

namespace stoker::models {
namespace {

struct CompiledRule {
  std::regex regex;
  double ordinal;
  std::vector<double> suffix;
  std::string group;
};

std::vector<CompiledRule> compile(const std::vector<LayerGroup>& groups) {
  std::vector<CompiledRule> out;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const LayerRule& rule : groups[g].rules) {
      try {
        out.push_back({std::regex(rule.regex, std::regex::ECMAScript), static_cast<double>(g), rule.suffix,
                       groups[g].name});
      } catch (const std::regex_error& e) {
        STOKER_FAIL("layer group '{}': the regular expression '{}' does not compile ({})", groups[g].name,
                    rule.regex, e.what());
      }
    }
  }
  return out;
}

// timm's _get_grouping: (ordinal, captured numbers..., suffix...) of the first rule that matches at
// the start of the name, or (inf) for none; and the group's name.
std::pair<std::vector<double>, std::string> key_of(const std::string& name, const std::vector<CompiledRule>& rules) {
  for (const CompiledRule& rule : rules) {
    std::smatch m;
    if (!std::regex_search(name, m, rule.regex, std::regex_constants::match_continuous)) continue;
    std::vector<double> key = {rule.ordinal};
    for (size_t i = 1; i < m.size(); ++i) {
      if (m[i].matched) key.push_back(std::stod(m[i].str()));
    }
    key.insert(key.end(), rule.suffix.begin(), rule.suffix.end());
    return {key, rule.group};
  }
  return {{std::numeric_limits<double>::infinity()}, "head"};
}

}  // namespace

LayerAssignment assign_layers(const std::vector<std::string>& names, const std::vector<LayerGroup>& groups) {
  LayerAssignment out;
  out.layer.assign(names.size(), 0);
  if (groups.empty()) {
    out.layer_names = {"all"};
    return out;
  }
  const std::vector<CompiledRule> rules = compile(groups);
  // Python compares tuples element by element, a shorter prefix first: std::vector's operator< too.
  std::map<std::vector<double>, std::vector<size_t>> by_key;
  std::map<std::vector<double>, std::string> group_of;
  for (size_t i = 0; i < names.size(); ++i) {
    auto [key, group] = key_of(names[i], rules);
    by_key[key].push_back(i);
    group_of.emplace(key, group);
  }
  int64_t layer = -1;
  for (const auto& [key, members] : by_key) {
    if (layer < 0 || key.back() != kMatchPrevious) {
      ++layer;
      out.layer_names.push_back(group_of[key]);
    }
    for (size_t i : members) out.layer[i] = layer;
  }
  out.num_layers = std::max<int64_t>(1, layer + 1);
  return out;
}

}  // namespace stoker::models
