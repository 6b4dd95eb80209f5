#include "recipe/overrides.h"

#include <optional>
#include <regex>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"

namespace stoker {
namespace {

// `inner` is `outer` or a key, section or list item inside it.
bool within(const std::string& inner, const std::string& outer) {
  if (inner.size() < outer.size() || inner.compare(0, outer.size(), outer) != 0) return false;
  return inner.size() == outer.size() || inner[outer.size()] == '.' || inner[outer.size()] == '[';
}

// One step of a key path: a key, and a list index after it (`train_transforms[0]`).
struct PathStep {
  std::string key;
  std::optional<size_t> index;
};

std::vector<PathStep> parse_path(const std::string& text, const std::string& path) {
  static const std::regex step_re(R"(([A-Za-z0-9_-]+)(?:\[([0-9]{1,6})\])?)");
  std::vector<PathStep> steps;
  std::stringstream ss(path);
  for (std::string part; std::getline(ss, part, '.');) {
    if (part.empty()) throw Error(fmt::format("--set {}: empty key in path '{}'", text, path));
    std::smatch m;
    if (!std::regex_match(part, m, step_re)) {
      throw Error(fmt::format("--set {}: '{}' is not a key; write a name, or a name and a list index such as "
                              "train_transforms[0]",
                              text, part));
    }
    steps.push_back({m[1].str(), m[2].matched ? std::optional<size_t>(std::stoul(m[2].str())) : std::nullopt});
  }
  if (path.back() == '.') throw Error(fmt::format("--set {}: empty key in path '{}'", text, path));
  return steps;
}

// The list item `step` names in `node` (a list that long), for --set `text`.
YAML::Node item_of(YAML::Node node, const PathStep& step, const std::string& text) {
  YAML::Node list = node[step.key];
  if (!list.IsDefined() || list.IsNull()) {
    throw Error(fmt::format("--set {}: the config gives no {} to take item [{}] of (defaults are not indexed); set "
                            "the whole list instead",
                            text, step.key, *step.index));
  }
  if (!list.IsSequence() || *step.index >= list.size()) {
    throw Error(fmt::format("--set {}: {}[{}] is not an item of a list ({} {}); index the items the config "
                            "has, from 0",
                            text, step.key, *step.index, step.key,
                            list.IsSequence() ? fmt::format("has {} item(s)", list.size()) : "is not a list"));
  }
  return list[*step.index];
}

// The mapping that holds the last step of `steps`, making missing sections on the way.
// (yaml-cpp's Node::operator= writes through to the node referred to; reset() rebinds.)
YAML::Node parent_of(YAML::Node& root, const std::vector<PathStep>& steps, const std::string& text) {
  if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) throw Error(fmt::format("--set {}: the config is not a mapping", text));
  YAML::Node node = root;
  for (size_t i = 0; i + 1 < steps.size(); ++i) {
    const PathStep& step = steps[i];
    if (!step.index && (!node[step.key].IsDefined() || node[step.key].IsNull())) {
      node[step.key] = YAML::Node(YAML::NodeType::Map);
    }
    YAML::Node child = step.index ? item_of(node, step, text) : YAML::Node(node[step.key]);
    if (!child.IsMap()) throw Error(fmt::format("--set {}: '{}' is not a section of keys", text, step.key));
    node.reset(child);
  }
  return node;
}

YAML::Node parse_value(const std::string& text, const std::string& value) {
  try {
    return YAML::Load(value);
  } catch (const YAML::Exception& e) {
    throw Error(fmt::format("--set {}: the value is not valid YAML ({})", text, e.msg));
  }
}

// Puts one --set into the tree; returns what it replaced. `mapping`: its value is a mapping.
Override apply_one(YAML::Node& root, const std::string& text, bool& mapping) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw Error(fmt::format("--set {}: expected key.path=value, e.g. --set optimizer.lr=0.05", text));
  }
  Override o;
  o.path = text.substr(0, eq);
  const std::vector<PathStep> steps = parse_path(text, o.path);
  const YAML::Node value = parse_value(text, text.substr(eq + 1));
  mapping = value.IsMap();
  if (steps.size() < 2 && (!value.IsMap() || steps[0].index)) {
    throw Error(fmt::format("--set {}: expected section.key=value (e.g. train.epochs=3), or a whole section as a "
                            "mapping (e.g. --set 'optimizer={{type: adamw, lr: 0.002}}')",
                            text));
  }
  YAML::Node parent = parent_of(root, steps, text);
  const PathStep& last = steps.back();
  if (last.index) {
    YAML::Node item = item_of(parent, last, text);
    o.file_value = YAML::Clone(item);
    item = value;
  } else {
    if (parent[last.key].IsDefined()) o.file_value = YAML::Clone(parent[last.key]);
    parent[last.key] = value;
  }
  return o;
}

}  // namespace

bool AppliedOverrides::covers(const std::string& path) const {
  for (const Override& o : items) {
    if (within(path, o.path)) return true;
  }
  return false;
}

bool AppliedOverrides::touches(const std::string& path) const {
  for (const Override& o : items) {
    if (within(path, o.path) || within(o.path, path)) return true;
  }
  return false;
}

const Override* AppliedOverrides::find(const std::string& path) const {
  for (const Override& o : items) {
    if (o.path == path) return &o;
  }
  return nullptr;
}

const Override* AppliedOverrides::first_within(const std::string& path) const {
  for (const Override& o : items) {
    if (within(o.path, path)) return &o;
  }
  return nullptr;
}

AppliedOverrides apply_overrides(YAML::Node& root, const std::vector<std::string>& overrides,
                                 const std::string& source) {
  AppliedOverrides applied;
  for (const std::string& text : overrides) {
    bool mapping = false;
    Override o = apply_one(root, text, mapping);
    o.replaced_file = !applied.covers(o.path);
    if (o.replaced_file && mapping && o.file_value.IsMap() && o.file_value.size() > 0) {
      std::vector<std::string> keys;
      for (const auto& kv : o.file_value) keys.push_back(kv.first.Scalar());
      applied.notes.push_back(fmt::format("{}: the whole section from --set; dropped the keys {} gave it: {} (keys "
                                          "not given take their defaults)",
                                          o.path, source, fmt::join(keys, ", ")));
    }
    applied.items.push_back(std::move(o));
  }
  return applied;
}

}  // namespace stoker
