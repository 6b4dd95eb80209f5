#include "recipe/yaml_options.h"

#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"

namespace stoker {
namespace {

std::string join(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

std::string quote(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "nothing";
  if (node.IsScalar()) return fmt::format("\"{}\"", node.Scalar());
  if (node.IsSequence()) return "a list";
  return "a mapping";
}

// Reads a child without inserting it (yaml-cpp's non-const operator[] would).
YAML::Node child(const YAML::Node& node, const std::string& key) {
  if (!node.IsDefined() || !node.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
  return YAML::Node(node[key]);
}

}  // namespace

// ---- reading ------------------------------------------------------------------------------------

struct YamlReader::Frame {
  YAML::Node node;
  std::string prefix;
  std::set<std::string> keys;  // the keys this mapping knows
  std::string chosen;          // "model type 'resnet50'" when a registered type chose some keys
  std::string chosen_type;
  const TypeCatalog* own_sections = nullptr;  // kOwnSection: other types' sections are misplaced
};

YamlReader::YamlReader(YAML::Node root, std::string source, std::set<std::string> overridden)
    : source_(std::move(source)), overridden_(std::move(overridden)) {
  frames_.push_back(std::make_shared<Frame>(Frame{root, "", {}, "", "", nullptr}));
}

YamlReader::Frame& YamlReader::top() { return *frames_.back(); }

void YamlReader::fail(const YAML::Node& node, const std::string& path, const std::string& message) const {
  // A value from --set is reported as such: its line would point into the override, not the file.
  for (const auto& o : overridden_) {
    if (path == o || path.rfind(o + ".", 0) == 0 || path.rfind(o + "[", 0) == 0) {
      throw Error(fmt::format("--set {}: {}", path, message));
    }
  }
  const auto mark = node.Mark();
  const std::string where = mark.is_null() ? "" : fmt::format(" at line {}", mark.line + 1);
  throw Error(fmt::format("{}: {}{}: {}", source_, path.empty() ? "(top level)" : path, where, message));
}

void YamlReader::fail_expected(const YAML::Node& node, const std::string& path,
                               const std::string& expected) const {
  fail(node, path, fmt::format("expected {}, got {}", expected, quote(node)));
}

void YamlReader::section(const char* key, const std::function<void()>& body) {
  Frame& parent = top();
  parent.keys.insert(key);
  const std::string path = join(parent.prefix, key);
  const YAML::Node node = child(parent.node, key);  // a missing section reads as all defaults
  if (node.IsDefined() && !node.IsNull() && !node.IsMap()) fail_expected(node, path, "a mapping of keys");
  frames_.push_back(std::make_shared<Frame>(Frame{node, path, {}, "", "", nullptr}));
  body();
  check_unknown_keys(top());
  frames_.pop_back();
}

void YamlReader::check_unknown_keys(const Frame& frame) {
  if (!frame.node.IsDefined() || !frame.node.IsMap()) return;
  for (const auto& kv : frame.node) {
    if (!kv.first.IsScalar()) {  // `{a: 1}: x` or `[a]: x` (as<std::string> would throw yaml-cpp's error)
      const char* what = kv.first.IsMap() ? "a mapping" : kv.first.IsSequence() ? "a list" : "empty";
      fail(kv.first, frame.prefix,
           fmt::format("a key must be a name, but this key is {}; write `name: value`", what));
    }
    const std::string name = kv.first.as<std::string>();
    if (frame.keys.count(name)) continue;
    const std::string path = join(frame.prefix, name);
    if (frame.prefix.empty()) {
      fail(kv.first, name, fmt::format("unknown section '{}'; known sections: {}", name, fmt::join(frame.keys, ", ")));
    }
    if (frame.own_sections != nullptr) {
      const auto types = frame.own_sections->names();
      if (std::find(types.begin(), types.end(), name) != types.end()) {
        fail(kv.first, path, fmt::format("this section holds the keys of {}.type: {}, but {}.type is {}; "
                                         "remove it or change {}.type",
                                         frame.prefix, name, frame.prefix, frame.chosen_type, frame.prefix));
      }
    }
    if (!frame.chosen.empty()) {
      fail(kv.first, path, fmt::format("{} has no key '{}'; it takes: {}", frame.chosen, name, fmt::join(frame.keys, ", ")));
    }
    fail(kv.first, path, fmt::format("unknown key '{}' in section '{}'; known keys: {}", name, frame.prefix,
                                     fmt::join(frame.keys, ", ")));
  }
}

void YamlReader::check_top_level() {
  const YAML::Node& root = frames_.front()->node;
  if (!root.IsDefined() || root.IsNull()) return;
  if (!root.IsMap()) fail_expected(root, "", "a mapping of sections");
  check_unknown_keys(*frames_.front());
}

template <typename Number>
Number YamlReader::number(const YAML::Node& node, const std::string& path, const Rule& rule) const {
  Number v{};
  if (!node.IsScalar() || !YAML::convert<Number>::decode(node, v)) fail_expected(node, path, rule.expected);
  if constexpr (std::is_floating_point_v<Number>) {
    if (!std::isfinite(v)) fail_expected(node, path, rule.expected);
  }
  if (!rule.in_range(static_cast<double>(v))) fail_expected(node, path, rule.expected);
  return v;
}

template <typename T>
void YamlReader::read_list(const YAML::Node& node, const std::string& path, std::vector<T>& out,
                           const Rule& rule) const {
  const std::string expected =
      rule.min_items == 0 ? fmt::format("a list of values, each {}", rule.expected)
      : rule.min_items == rule.max_items
          ? fmt::format("a list of {} values, each {}", rule.min_items, rule.expected)
          : fmt::format("a list of at least {} value(s), each {}", rule.min_items, rule.expected);
  if (!node.IsSequence()) fail_expected(node, path, expected);
  if (node.size() < rule.min_items || node.size() > rule.max_items) {
    fail(node, path, fmt::format("expected {}, got {} value(s)", expected, node.size()));
  }
  std::vector<T> values;
  for (size_t i = 0; i < node.size(); ++i) values.push_back(number<T>(node[i], fmt::format("{}[{}]", path, i), rule));
  out = std::move(values);
}

// Finds `key` in the current mapping and reads it with `read(node, path)` when it is there.
template <typename T>
void YamlReader::read_field(const char* key, T& value, const Rule& rule) {
  Frame& frame = top();
  frame.keys.insert(key);
  const YAML::Node node = child(frame.node, key);
  if (!node.IsDefined()) return;
  const std::string path = join(frame.prefix, key);
  if constexpr (std::is_same_v<T, bool>) {
    bool v;
    if (!node.IsScalar() || !YAML::convert<bool>::decode(node, v)) fail_expected(node, path, "true or false");
    value = v;
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!node.IsScalar() || !rule.accepts_string(node.Scalar())) fail_expected(node, path, rule.expected);
    value = node.Scalar();
  } else if constexpr (std::is_same_v<T, uint64_t>) {
    Rule r = rule;
    r.expected = "an integer >= 0";
    if (node.IsScalar() && !node.Scalar().empty() && node.Scalar()[0] == '-') fail_expected(node, path, r.expected);
    value = number<uint64_t>(node, path, r);
  } else if constexpr (std::is_arithmetic_v<T>) {
    value = number<T>(node, path, rule);
  } else {
    read_list(node, path, value, rule);
  }
}

void YamlReader::field(const char* key, bool& value, const Rule& rule) { read_field(key, value, rule); }
void YamlReader::field(const char* key, int64_t& value, const Rule& rule) { read_field(key, value, rule); }
void YamlReader::field(const char* key, double& value, const Rule& rule) { read_field(key, value, rule); }
void YamlReader::field(const char* key, std::string& value, const Rule& rule) { read_field(key, value, rule); }
void YamlReader::field(const char* key, std::vector<int64_t>& value, const Rule& rule) {
  read_field(key, value, rule);
}
void YamlReader::field(const char* key, std::vector<double>& value, const Rule& rule) {
  read_field(key, value, rule);
}
void YamlReader::field(const char* key, uint64_t& value, const Rule& rule) { read_field(key, value, rule); }

// Visits the chosen type's options in the current frame, then its cross-key checks; a part's error
// gets the key path and line of the mapping it came from.
void YamlReader::visit_type(TypedOptions& value, const std::string& path, const YAML::Node& at) {
  value.options().visit(*this);
  try {
    value.options().check();
  } catch (const Error& e) {
    fail(at, path, e.what());
  }
}

void YamlReader::typed(TypedOptions& value, const TypeCatalog& catalog, TypedLayout layout) {
  Frame& frame = top();
  Rule known = rules::non_empty();
  known.expected = fmt::format("a registered {} type ({})", catalog.kind, fmt::join(catalog.names(), ", "));
  known.accepts = [&catalog](const std::string& s) {
    const auto names = catalog.names();
    return std::find(names.begin(), names.end(), s) != names.end();
  };
  std::string type = value.type();
  field("type", type, known);
  if (type != value.type()) value = TypedOptions(type, catalog.make(type));
  frame.chosen = fmt::format("{} type '{}'", catalog.kind, type);
  frame.chosen_type = type;
  if (layout == TypedLayout::kBeside) {
    visit_type(value, frame.prefix, frame.node);
    return;
  }
  frame.own_sections = &catalog;
  if (value.options().keys().empty()) return;
  section(type.c_str(), [&] { visit_type(value, top().prefix, top().node); });
}

void YamlReader::typed_list(const char* key, std::vector<TypedOptions>& list, const TypeCatalog& catalog) {
  Frame& frame = top();
  frame.keys.insert(key);
  const YAML::Node node = child(frame.node, key);
  if (!node.IsDefined()) return;
  const std::string path = join(frame.prefix, key);
  if (!node.IsSequence()) {
    fail_expected(node, path, fmt::format("a list of {}s, e.g. [{{type: {}}}]", catalog.kind, catalog.names().front()));
  }
  std::vector<TypedOptions> items;
  for (size_t i = 0; i < node.size(); ++i) {
    const YAML::Node item = node[i];
    const std::string at = fmt::format("{}[{}]", path, i);
    if (!item.IsMap()) fail_expected(item, at, "a mapping with a 'type' key");
    if (!item["type"].IsDefined()) {
      fail(item, at, fmt::format("missing 'type' (one of: {})", fmt::join(catalog.names(), ", ")));
    }
    frames_.push_back(std::make_shared<Frame>(Frame{item, at, {}, "", "", nullptr}));
    TypedOptions value;
    typed(value, catalog, TypedLayout::kBeside);
    check_unknown_keys(top());
    frames_.pop_back();
    items.push_back(std::move(value));
  }
  list = std::move(items);
}

// ---- writing ------------------------------------------------------------------------------------

YamlWriter::YamlWriter() { out_ << YAML::BeginMap; }

std::string YamlWriter::str() {
  out_ << YAML::EndMap;
  return std::string(out_.c_str()) + "\n";
}

void YamlWriter::field(const char* key, bool& value, const Rule&) {
  out_ << YAML::Key << key << YAML::Value << (value ? "true" : "false");
}
void YamlWriter::field(const char* key, int64_t& value, const Rule&) { out_ << YAML::Key << key << YAML::Value << value; }
// Shortest text that reads back as the same double (0.1, not 0.10000000000000001).
void YamlWriter::field(const char* key, double& value, const Rule&) {
  out_ << YAML::Key << key << YAML::Value << fmt::format("{}", value);
}
void YamlWriter::field(const char* key, std::string& value, const Rule&) { out_ << YAML::Key << key << YAML::Value << value; }
void YamlWriter::field(const char* key, uint64_t& value, const Rule&) { out_ << YAML::Key << key << YAML::Value << value; }
void YamlWriter::field(const char* key, std::vector<int64_t>& value, const Rule&) {
  out_ << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (int64_t v : value) out_ << v;
  out_ << YAML::EndSeq;
}
void YamlWriter::field(const char* key, std::vector<double>& value, const Rule&) {
  out_ << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (double v : value) out_ << fmt::format("{}", v);
  out_ << YAML::EndSeq;
}

void YamlWriter::section(const char* key, const std::function<void()>& body) {
  out_ << YAML::Key << key << YAML::Value << YAML::BeginMap;
  body();
  out_ << YAML::EndMap;
}

void YamlWriter::typed(TypedOptions& value, const TypeCatalog&, TypedLayout layout) {
  std::string type = value.type();
  field("type", type, Rule());
  if (layout == TypedLayout::kBeside) {
    value.options().visit(*this);
  } else if (!value.options().keys().empty()) {
    section(type.c_str(), [&] { value.options().visit(*this); });
  }
}

void YamlWriter::typed_list(const char* key, std::vector<TypedOptions>& list, const TypeCatalog& catalog) {
  out_ << YAML::Key << key << YAML::Value << YAML::BeginSeq;
  for (auto& item : list) {
    out_ << YAML::Flow << YAML::BeginMap;
    typed(item, catalog, TypedLayout::kBeside);
    out_ << YAML::EndMap;
  }
  out_ << YAML::EndSeq;
}

}  // namespace stoker
