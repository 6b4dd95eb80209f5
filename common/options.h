// Options that a part declares for itself: the keys, defaults and checks of one registered type (a
// model, a data set, a transform, a schedule, an optimizer), visited by the config layer.
//
// A type's options are a struct deriving from TypeOptions that names each key once in visit():
//
//   struct BarNetOptions : stoker::TypeOptionsOf<BarNetOptions> {
//     int64_t width = 16;
//     double dropout = 0.0;
//     void visit(stoker::OptionsVisitor& v) override {
//       v.field("width", width, stoker::rules::at_least(1));
//       v.field("dropout", dropout, stoker::rules::unit_open());
//     }
//     void check() const override {}  // checks across keys; messages name the keys as written
//   };
//
// The config reader (recipe/yaml_options.h) is an OptionsVisitor that reads each key from YAML and
// checks it against its Rule, the writer one that prints it, so a type's keys are read, validated,
// written back and listed in errors ("unknown key 'depth' for model.type: bar_net; it takes: dropout,
// width") without the config layer knowing the type. Messages from visit() and check() speak of the
// type's own keys; the config layer adds the file, the key path and the line when it rethrows.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace stoker {

// What a value must be, and how to say it in a message ("a positive number").
struct Rule {
  std::string expected;
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;
  std::vector<std::string> choices;                 // strings: the allowed values
  std::function<bool(const std::string&)> accepts;  // strings: a custom test
  size_t min_items = 0, max_items = SIZE_MAX;       // lists

  bool in_range(double v) const {
    return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  }
  // Whether a string value is allowed (choices, or the custom test, or anything).
  bool accepts_string(const std::string& s) const;
};

// The rules every part uses; each says in words what it accepts.
namespace rules {
Rule boolean();                        // true or false
Rule described(std::string expected);  // anything of the field's type
Rule number(std::string expected, double lo, double hi = std::numeric_limits<double>::infinity(),
            bool lo_open = false, bool hi_open = false);
Rule any_number();
Rule positive();       // > 0
Rule non_negative();   // >= 0
Rule at_least(int64_t n);
Rule unit_open();      // [0, 1)
Rule unit_closed();    // [0, 1]
Rule one_of(std::vector<std::string> choices);
Rule non_empty();      // a non-empty string
Rule matching(const char* regex, std::string expected);
// A list whose items each follow `item`, with between min_items and max_items of them.
Rule items(Rule item, size_t min_items, size_t max_items = SIZE_MAX);
}  // namespace rules

// A mapping of names to strings, in the order the YAML writes it (model.pretrained_rename:
// {"backbone.": ""}).
using StringPairs = std::vector<std::pair<std::string, std::string>>;

// Visits the keys of a set of options; implemented by the config reader and writer.
class OptionsVisitor {
 public:
  virtual ~OptionsVisitor() = default;
  virtual void field(const char* key, bool& value, const Rule& rule = rules::boolean()) = 0;
  virtual void field(const char* key, int64_t& value, const Rule& rule) = 0;
  virtual void field(const char* key, double& value, const Rule& rule) = 0;
  virtual void field(const char* key, std::string& value, const Rule& rule) = 0;
  virtual void field(const char* key, std::vector<int64_t>& value, const Rule& rule) = 0;
  virtual void field(const char* key, std::vector<double>& value, const Rule& rule) = 0;
  // A list of strings, each following `rule` (its choices or test), within its item counts.
  virtual void field(const char* key, std::vector<std::string>& value, const Rule& rule) = 0;
  // A mapping of names to strings (keys and values following `rule`'s test, if it has one).
  virtual void field(const char* key, StringPairs& value, const Rule& rule) = 0;
  // A nested mapping of keys, visited by `body`.
  virtual void section(const char* key, const std::function<void()>& body) = 0;
};

// The options of one registered type. Copy with clone(); Config holds them in TypedOptions.
class TypeOptions {
 public:
  virtual ~TypeOptions() = default;
  // Names every key once, with its rule. Called for reading, writing and listing keys alike.
  virtual void visit(OptionsVisitor& visitor) = 0;
  // Checks across keys, after reading; throws stoker::Error naming the keys.
  virtual void check() const {}
  virtual std::unique_ptr<TypeOptions> clone() const = 0;
  // The keys visit() names at its top level, in order (for messages).
  std::vector<std::string> keys();
};

// CRTP base that supplies clone() for a copyable options struct.
template <typename Derived>
class TypeOptionsOf : public TypeOptions {
 public:
  std::unique_ptr<TypeOptions> clone() const override {
    return std::make_unique<Derived>(static_cast<const Derived&>(*this));
  }
};

// A type with no keys of its own.
struct NoOptions : TypeOptionsOf<NoOptions> {
  void visit(OptionsVisitor&) override {}
};

// A registered type's name and its options: what `model:`, `data:` (its data set), each transform
// and `schedule:` hold. A value type: copies are deep.
class TypedOptions {
 public:
  TypedOptions() : options_(std::make_unique<NoOptions>()) {}
  TypedOptions(std::string type, std::unique_ptr<TypeOptions> options);
  TypedOptions(const TypedOptions& other);
  TypedOptions& operator=(const TypedOptions& other);
  TypedOptions(TypedOptions&&) noexcept = default;
  TypedOptions& operator=(TypedOptions&&) noexcept = default;

  const std::string& type() const { return type_; }
  TypeOptions& options() { return *options_; }
  const TypeOptions& options() const { return *options_; }
  // The options as the registered type's own struct; an error naming both types if they are not.
  template <typename T>
  const T& as() const {
    const T* p = dynamic_cast<const T*>(options_.get());
    if (p == nullptr) wrong_type(typeid(T).name());
    return *p;
  }
  template <typename T>
  T& as() {
    return const_cast<T&>(static_cast<const TypedOptions&>(*this).as<T>());
  }

 private:
  [[noreturn]] void wrong_type(const char* wanted) const;
  std::string type_;
  std::unique_ptr<TypeOptions> options_;
};

// What a registry entry supplies so that the config layer can read a `type:` and its keys: the
// default options of a type. Registries of types with options hold one of these per entry.
using OptionsMaker = std::function<std::unique_ptr<TypeOptions>()>;

// Default options of type T (a TypeOptions struct), as an OptionsMaker.
template <typename T>
OptionsMaker options_of() {
  return [] { return std::make_unique<T>(); };
}

}  // namespace stoker
