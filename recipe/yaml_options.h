// YAML <-> options: the config reader and writer, as OptionsVisitors (common/options.h).
//
// YamlReader reads each visited key from a YAML tree, checks it against its Rule and reports any
// problem with the file, the key path and the line (`recipe.yaml: optimizer.lr at line 12: expected
// a positive number, got "fast"`); a value that came from --set is reported as such. Keys a section
// does not name are errors that suggest the closest known key (`train.epoch: unknown key; did you
// mean epochs?`) or list the keys it has. Registered types (models, data sets, transforms,
// schedules) are read through their TypeCatalog: `type` picks the type, whose own options then
// declare and check its keys; their errors are rethrown with the key path and line. When a --set
// switched the type, the file's keys that only the old type has are dropped, with one note naming
// them (notes()). YamlWriter prints every visited key (the resolved config).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "common/options.h"
#include "recipe/overrides.h"

namespace stoker {

// How the config layer finds a registered type's options by name.
struct TypeCatalog {
  std::string kind;  // "model", "data set", "transform", "schedule", ... (for messages)
  std::function<std::vector<std::string>()> names;
  std::function<std::unique_ptr<TypeOptions>(const std::string&)> make;  // defaults of a known type
};

// A catalog over a Registry<Entry> whose entries have an `OptionsMaker options` member.
template <typename Registry>
TypeCatalog catalog_of(Registry& registry, std::string kind) {
  return {std::move(kind), [&registry] { return registry.names(); },
          [&registry](const std::string& name) { return registry.get(name).options(); }};
}

// Where a registered type's own keys sit beside its `type` key.
enum class TypedLayout {
  kBeside,     // in the same mapping: model: {type: compact_resnet, widths: [16, 32]}
  kOwnSection  // in a mapping named after the type: data: {type: synthetic, synthetic: {height: 8}}
};

class YamlReader : public OptionsVisitor {
 public:
  // `overrides`: what --set put into `root` (apply_overrides).
  YamlReader(YAML::Node root, std::string source, AppliedOverrides overrides = {});

  void field(const char* key, bool& value, const Rule& rule = rules::boolean()) override;
  void field(const char* key, int64_t& value, const Rule& rule) override;
  void field(const char* key, double& value, const Rule& rule) override;
  void field(const char* key, std::string& value, const Rule& rule) override;
  void field(const char* key, std::vector<int64_t>& value, const Rule& rule) override;
  void field(const char* key, std::vector<double>& value, const Rule& rule) override;
  void field(const char* key, std::vector<std::string>& value, const Rule& rule) override;
  void field(const char* key, StringPairs& value, const Rule& rule) override;
  void field(const char* key, uint64_t& value, const Rule& rule);
  // A key that is true (`all`), false, or a list of integers >= 0 (model.activation_checkpointing: [0, 3]).
  void all_or_list(const char* key, bool& all, std::vector<int64_t>& list, const Rule& rule);
  void section(const char* key, const std::function<void()>& body) override;
  // The current section's `type` key and the chosen type's own keys.
  void typed(TypedOptions& value, const TypeCatalog& catalog, TypedLayout layout);
  // A list of typed mappings: train_transforms: [{type: resize, size: 36}, {type: center_crop, size: 32}]
  void typed_list(const char* key, std::vector<TypedOptions>& list, const TypeCatalog& catalog);
  // Top-level keys that are not sections are errors.
  void check_top_level();
  // One line per registered type a --set switched that dropped the file's keys of the old type.
  const std::vector<std::string>& notes() const { return notes_; }

 private:
  struct Frame;
  Frame& top();
  void visit_type(TypedOptions& value, const std::string& path, const YAML::Node& at);
  void check_type(const TypedOptions& value, const std::string& path, const YAML::Node& at) const;
  void drop_old_type_keys(Frame& frame, const TypeCatalog& catalog, TypedLayout layout, const std::string& default_type);
  std::string unknown_key_message(const Frame& frame, const std::string& name) const;
  template <typename T>
  void read_field(const char* key, T& value, const Rule& rule);
  void check_unknown_keys(const Frame& frame);
  [[noreturn]] void fail(const YAML::Node& node, const std::string& path, const std::string& message) const;
  [[noreturn]] void fail_expected(const YAML::Node& node, const std::string& path, const std::string& expected) const;
  template <typename Number>
  Number number(const YAML::Node& node, const std::string& path, const Rule& rule) const;
  template <typename T>
  void read_list(const YAML::Node& node, const std::string& path, std::vector<T>& out, const Rule& rule) const;
  void read_pairs(const YAML::Node& node, const std::string& path, StringPairs& out, const Rule& rule) const;

  std::string source_;
  AppliedOverrides overrides_;
  std::vector<std::string> notes_;
  std::vector<std::shared_ptr<Frame>> frames_;
  bool defer_check_ = false;  // visit_type leaves check() to typed_list
};

class YamlWriter : public OptionsVisitor {
 public:
  YamlWriter();
  // The YAML text of everything visited so far (call once, at the end).
  std::string str();

  void field(const char* key, bool& value, const Rule& rule = rules::boolean()) override;
  void field(const char* key, int64_t& value, const Rule& rule) override;
  void field(const char* key, double& value, const Rule& rule) override;
  void field(const char* key, std::string& value, const Rule& rule) override;
  void field(const char* key, std::vector<int64_t>& value, const Rule& rule) override;
  void field(const char* key, std::vector<double>& value, const Rule& rule) override;
  void field(const char* key, std::vector<std::string>& value, const Rule& rule) override;
  void field(const char* key, StringPairs& value, const Rule& rule) override;
  void field(const char* key, uint64_t& value, const Rule& rule);
  void all_or_list(const char* key, bool& all, std::vector<int64_t>& list, const Rule& rule);
  void section(const char* key, const std::function<void()>& body) override;
  void typed(TypedOptions& value, const TypeCatalog& catalog, TypedLayout layout);
  void typed_list(const char* key, std::vector<TypedOptions>& list, const TypeCatalog& catalog);

 private:
  YAML::Emitter out_;
};

}  // namespace stoker
