#include "common/options.h"

#include <algorithm>
#include <cmath>
#include <regex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"

namespace stoker {

bool Rule::accepts_string(const std::string& s) const {
  if (!choices.empty()) return std::find(choices.begin(), choices.end(), s) != choices.end();
  return !accepts || accepts(s);
}

namespace rules {

Rule boolean() { return described("true or false"); }

Rule described(std::string expected) {
  Rule r;
  r.expected = std::move(expected);
  return r;
}

Rule number(std::string expected, double lo, double hi, bool lo_open, bool hi_open) {
  Rule r = described(std::move(expected));
  r.lo = lo;
  r.hi = hi;
  r.lo_open = lo_open;
  r.hi_open = hi_open;
  return r;
}

Rule any_number() { return described("a number"); }
Rule positive() { return number("a positive number", 0, INFINITY, true); }
Rule non_negative() { return number("a number >= 0", 0); }
Rule at_least(int64_t n) { return number(fmt::format("an integer >= {}", n), double(n)); }
Rule unit_open() { return number("a number in [0, 1)", 0, 1, false, true); }
Rule unit_closed() { return number("a number in [0, 1]", 0, 1); }

Rule one_of(std::vector<std::string> choices) {
  Rule r = described(fmt::format("one of: {}", fmt::join(choices, ", ")));
  r.choices = std::move(choices);
  return r;
}

Rule non_empty() {
  Rule r = described("a non-empty string");
  r.accepts = [](const std::string& s) { return !s.empty(); };
  return r;
}

Rule matching(const char* pattern, std::string expected) {
  Rule r = described(std::move(expected));
  r.accepts = [re = std::regex(pattern)](const std::string& s) { return std::regex_match(s, re); };
  return r;
}

Rule items(Rule item, size_t min_items, size_t max_items) {
  item.min_items = min_items;
  item.max_items = max_items;
  return item;
}

}  // namespace rules

namespace {

// Records the top-level keys a TypeOptions names, touching nothing.
class KeyLister : public OptionsVisitor {
 public:
  std::vector<std::string> keys;
  void field(const char* key, bool&, const Rule&) override { add(key); }
  void field(const char* key, int64_t&, const Rule&) override { add(key); }
  void field(const char* key, double&, const Rule&) override { add(key); }
  void field(const char* key, std::string&, const Rule&) override { add(key); }
  void field(const char* key, std::vector<int64_t>&, const Rule&) override { add(key); }
  void field(const char* key, std::vector<double>&, const Rule&) override { add(key); }
  void field(const char* key, std::vector<std::string>&, const Rule&) override { add(key); }
  void field(const char* key, StringPairs&, const Rule&) override { add(key); }
  void section(const char* key, const std::function<void()>&) override { add(key); }

 private:
  void add(const char* key) { keys.emplace_back(key); }
};

}  // namespace

std::vector<std::string> TypeOptions::keys() {
  KeyLister lister;
  visit(lister);
  return lister.keys;
}

TypedOptions::TypedOptions(std::string type, std::unique_ptr<TypeOptions> options)
    : type_(std::move(type)), options_(std::move(options)) {
  STOKER_CHECK(options_ != nullptr, "the options of type '{}' are missing", type_);
}

TypedOptions::TypedOptions(const TypedOptions& other)
    : type_(other.type_), options_(other.options_->clone()) {}

TypedOptions& TypedOptions::operator=(const TypedOptions& other) {
  if (this != &other) {
    type_ = other.type_;
    options_ = other.options_->clone();
  }
  return *this;
}

void TypedOptions::wrong_type(const char* wanted) const {
  STOKER_FAIL("the options of type '{}' are not the options struct {} that the code asked for; "
              "register the type with the options struct its factory reads",
              type_, wanted);
}

}  // namespace stoker
