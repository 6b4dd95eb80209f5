#include "recipe/yaml_options.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>

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

// Edit distance between two keys, ignoring case: insertions, deletions, substitutions and swaps of two
// neighbouring letters (the optimal string alignment distance), so that `trian` is one edit from `train`.
size_t edit_distance(const std::string& a, const std::string& b) {
  const auto same = [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
  };
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (same(a[i - 1], b[j - 1]) ? 0 : 1)});
      if (i > 1 && j > 1 && same(a[i - 1], b[j - 2]) && same(a[i - 2], b[j - 1])) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// The known key `name` was probably meant to be: the nearest within an edit or two (one for names of
// up to five letters), or one that starts with it or it with (three letters at least); "" if none.
std::string closest(const std::string& name, const std::set<std::string>& known) {
  const size_t limit = name.size() <= 5 ? 1 : 2;
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const std::string& key : known) {
    const size_t d = edit_distance(name, key);
    const bool prefix = std::min(name.size(), key.size()) >= 3 &&
                        (key.rfind(name, 0) == 0 || name.rfind(key, 0) == 0);
    if ((d <= limit || prefix) && d < best_distance) {
      best = key;
      best_distance = d;
    }
  }
  return best;
}

}  // namespace

// ---- reading ------------------------------------------------------------------------------------

struct YamlReader::Frame {
  Frame(YAML::Node node, std::string prefix) : node(std::move(node)), prefix(std::move(prefix)) {}
  YAML::Node node;
  std::string prefix;
  std::set<std::string> keys;  // the keys this mapping knows
  std::string chosen;          // "model type 'resnet50'" when a registered type chose some keys
  std::string chosen_type;
  const TypeCatalog* own_sections = nullptr;  // kOwnSection: other types' sections are misplaced
  std::set<std::string> dropped;  // the file's keys of the type a --set switched from (not read)
};

YamlReader::YamlReader(YAML::Node root, std::string source, AppliedOverrides overrides)
    : source_(std::move(source)), overrides_(std::move(overrides)) {
  frames_.push_back(std::make_shared<Frame>(root, ""));
}

YamlReader::Frame& YamlReader::top() { return *frames_.back(); }

void YamlReader::fail(const YAML::Node& node, const std::string& path, const std::string& message) const {
  // A value from --set is reported as such: its line would point into the override, not the file.
  if (overrides_.covers(path)) throw Error(fmt::format("--set {}: {}", path, message));
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
  frames_.push_back(std::make_shared<Frame>(node, path));
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
    if (frame.keys.count(name) || frame.dropped.count(name)) continue;
    const std::string path = join(frame.prefix, name);
    // A key that a --set wrote (`--set trian.epochs=3`) is the command line's mistake, not the file's.
    if (const Override* set = overrides_.first_within(path)) {
      throw Error(fmt::format("--set {}: {}", set->path, unknown_key_message(frame, name)));
    }
    fail(kv.first, path, unknown_key_message(frame, name));
  }
}

// Why `name` is not a key of `frame`, with the closest known key or the list of them.
std::string YamlReader::unknown_key_message(const Frame& frame, const std::string& name) const {
  const std::string close = closest(name, frame.keys);
  const std::string maybe = close.empty() ? "" : fmt::format("; did you mean {}?", close);
  if (frame.prefix.empty()) {
    return fmt::format("unknown section '{}'{}", name,
                       close.empty() ? fmt::format("; known sections: {}", fmt::join(frame.keys, ", ")) : maybe);
  }
  if (frame.own_sections != nullptr) {
    const auto types = frame.own_sections->names();
    if (std::find(types.begin(), types.end(), name) != types.end()) {
      return fmt::format("this section holds the keys of {}.type: {}, but {}.type is {}; remove it or change {}.type",
                         frame.prefix, name, frame.prefix, frame.chosen_type, frame.prefix);
    }
  }
  if (!frame.chosen.empty()) {
    return fmt::format("{} has no key '{}'{}", frame.chosen, name,
                       close.empty() ? fmt::format("; it takes: {}", fmt::join(frame.keys, ", ")) : maybe);
  }
  if (!close.empty()) return "unknown key" + maybe;
  return fmt::format("unknown key '{}' in section '{}'; known keys: {}", name, frame.prefix, fmt::join(frame.keys, ", "));
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
  for (size_t i = 0; i < node.size(); ++i) {
    const std::string at = fmt::format("{}[{}]", path, i);
    if constexpr (std::is_same_v<T, std::string>) {
      if (!node[i].IsScalar() || !rule.accepts_string(node[i].Scalar())) fail_expected(node[i], at, rule.expected);
      values.push_back(node[i].Scalar());
    } else {
      values.push_back(number<T>(node[i], at, rule));
    }
  }
  out = std::move(values);
}

void YamlReader::read_pairs(const YAML::Node& node, const std::string& path, StringPairs& out, const Rule& rule) const {
  const std::string expected = fmt::format("a mapping of names to strings, e.g. {{\"backbone.\": \"\"}}, each {}",
                                           rule.expected);
  if (!node.IsMap()) fail_expected(node, path, expected);
  StringPairs pairs;
  for (const auto& kv : node) {
    const std::string at = kv.first.IsScalar() ? join(path, kv.first.Scalar()) : path;
    if (!kv.first.IsScalar() || !rule.accepts_string(kv.first.Scalar())) fail_expected(kv.first, at, rule.expected);
    // `"backbone.": ` (nothing) reads as the empty string.
    if (!kv.second.IsNull() && (!kv.second.IsScalar() || !rule.accepts_string(kv.second.Scalar()))) {
      fail_expected(kv.second, at, rule.expected);
    }
    pairs.emplace_back(kv.first.Scalar(), kv.second.IsNull() ? std::string() : kv.second.Scalar());
  }
  out = std::move(pairs);
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
  } else if constexpr (std::is_same_v<T, StringPairs>) {
    read_pairs(node, path, value, rule);
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
void YamlReader::field(const char* key, std::vector<std::string>& value, const Rule& rule) {
  read_field(key, value, rule);
}
void YamlReader::field(const char* key, StringPairs& value, const Rule& rule) { read_field(key, value, rule); }
void YamlReader::field(const char* key, uint64_t& value, const Rule& rule) { read_field(key, value, rule); }

void YamlReader::all_or_list(const char* key, bool& all, std::vector<int64_t>& list, const Rule& rule) {
  Frame& frame = top();
  frame.keys.insert(key);
  const YAML::Node node = child(frame.node, key);
  if (!node.IsDefined()) return;
  const std::string path = join(frame.prefix, key);
  bool flag = false;
  if (node.IsScalar() && YAML::convert<bool>::decode(node, flag)) {
    all = flag;
    list.clear();
    return;
  }
  if (!node.IsSequence()) fail_expected(node, path, rule.expected);
  read_list(node, path, list, rules::at_least(0));
  all = false;
}

// Visits the chosen type's options in the current frame, then its cross-key checks; a part's error
// gets the key path and line of the mapping it came from.
void YamlReader::visit_type(TypedOptions& value, const std::string& path, const YAML::Node& at) {
  value.options().visit(*this);
  if (defer_check_) return;  // typed_list checks the item's keys first, then the options (check_type)
  check_type(value, path, at);
}

void YamlReader::check_type(const TypedOptions& value, const std::string& path, const YAML::Node& at) const {
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
  const std::string default_type = value.type();
  std::string type = default_type;
  const YAML::Node given = child(frame.node, "type");
  if (given.IsDefined() && given.IsScalar() && !known.accepts(given.Scalar())) {
    // `type: ResNet18`: the registered name it was probably meant to be.
    const auto names = catalog.names();
    const std::string close = closest(given.Scalar(), std::set<std::string>(names.begin(), names.end()));
    if (!close.empty()) {
      fail(given, join(frame.prefix, "type"),
           fmt::format("unknown {} type \"{}\"; did you mean {}? (known: {})", catalog.kind, given.Scalar(), close,
                       fmt::join(names, ", ")));
    }
  }
  field("type", type, known);
  if (type != value.type()) value = TypedOptions(type, catalog.make(type));
  frame.chosen = fmt::format("{} type '{}'", catalog.kind, type);
  frame.chosen_type = type;
  drop_old_type_keys(frame, catalog, layout, default_type);
  if (layout == TypedLayout::kBeside) {
    visit_type(value, frame.prefix, frame.node);
    return;
  }
  frame.own_sections = &catalog;
  if (value.options().keys().empty()) return;
  section(type.c_str(), [&] { visit_type(value, top().prefix, top().node); });
}

// After a --set of `<section>.type` that switched the type the file chose (or left at
// `default_type`): the file's keys of the old type that the new one lacks are not read, and one note
// names them. Keys given on the command line are never dropped: for the wrong type they stay errors.
void YamlReader::drop_old_type_keys(Frame& frame, const TypeCatalog& catalog, TypedLayout layout,
                                    const std::string& default_type) {
  const std::string type_path = join(frame.prefix, "type");
  const Override* set = overrides_.find(type_path);
  if (set == nullptr || !set->replaced_file || !frame.node.IsMap()) return;
  const std::string old = set->file_value.IsScalar() ? set->file_value.Scalar() : default_type;
  const auto names = catalog.names();
  if (old == frame.chosen_type || std::find(names.begin(), names.end(), old) == names.end()) return;
  std::vector<std::string> dropped;
  if (layout == TypedLayout::kOwnSection) {
    const YAML::Node section = child(frame.node, old);  // the old type's keys, in a section of its name
    if (section.IsDefined() && !overrides_.touches(join(frame.prefix, old))) {
      frame.dropped.insert(old);
      if (section.IsMap() && section.size() > 0) {
        for (const auto& kv : section) dropped.push_back(old + "." + kv.first.Scalar());
      } else {
        dropped.push_back(old);
      }
    }
  } else {
    const auto old_keys = catalog.make(old)->keys(), new_keys = catalog.make(frame.chosen_type)->keys();
    auto has = [](const std::vector<std::string>& keys, const std::string& k) {
      return std::find(keys.begin(), keys.end(), k) != keys.end();
    };
    for (const auto& kv : frame.node) {
      const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "";
      if (!has(old_keys, key) || has(new_keys, key) || overrides_.covers(join(frame.prefix, key))) continue;
      frame.dropped.insert(key);
      dropped.push_back(key);
    }
  }
  if (dropped.empty()) return;
  notes_.push_back(fmt::format("{}: {} (was {} in {}): dropped the keys {} does not have: {}", type_path,
                               frame.chosen_type, old, source_, frame.chosen_type, fmt::join(dropped, ", ")));
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
    frames_.push_back(std::make_shared<Frame>(item, at));
    TypedOptions value;
    // An unknown key (a misspelt one) is reported before the options' own checks, which it may explain.
    defer_check_ = true;
    typed(value, catalog, TypedLayout::kBeside);
    defer_check_ = false;
    check_unknown_keys(top());
    check_type(value, at, item);
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

void YamlWriter::field(const char* key, std::vector<std::string>& value, const Rule&) {
  out_ << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (const std::string& v : value) out_ << YAML::DoubleQuoted << v;
  out_ << YAML::EndSeq;
}
void YamlWriter::field(const char* key, StringPairs& value, const Rule&) {
  out_ << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginMap;
  for (const auto& [from, to] : value) out_ << YAML::Key << YAML::DoubleQuoted << from << YAML::Value << YAML::DoubleQuoted << to;
  out_ << YAML::EndMap;
}

void YamlWriter::all_or_list(const char* key, bool& all, std::vector<int64_t>& list, const Rule& rule) {
  if (all || list.empty()) {
    field(key, all, rule);
    return;
  }
  field(key, list, rule);
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
