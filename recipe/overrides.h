// --set overrides on a config's YAML tree: parse_config's first step, before the reader
// (recipe/yaml_options.h) visits the tree.
//
// Each --set is "key.path=value" with a YAML value, put at that path in place of what the file has
// there: `train.epochs=3`, `model.widths=[8,16]`, a list item `data.train_transforms[0].p=0.3`, or a
// whole section as a mapping, `optimizer={type: adamw, lr: 0.002}` (the file's keys of that section
// are all dropped; keys not given take their defaults). What each --set replaced is kept, so that the
// reader can tell the file's keys from the command line's: a --set that switches a registered type
// (optimizer.type=adamw) drops the file's keys of the old type, while a key given on the command line
// for the wrong type stays an error.
#pragma once

#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace stoker {

// One --set as applied to the tree.
struct Override {
  std::string path;       // "optimizer.type", "data.train_transforms[0].p"
  YAML::Node file_value;  // what the text had at `path` before (a copy; undefined when nothing)
  bool replaced_file = true;  // false when an earlier --set had already set `path` or a section holding it
};

struct AppliedOverrides {
  std::vector<Override> items;     // in command-line order
  std::vector<std::string> notes;  // one line per whole section replaced, naming the file's keys it dropped

  // Whether `path` or a section holding it was set on the command line.
  bool covers(const std::string& path) const;
  // Whether any --set was at `path`, inside it or around it.
  bool touches(const std::string& path) const;
  // The first --set of exactly `path`; nullptr when there is none.
  const Override* find(const std::string& path) const;
  // The first --set at `path` or inside it (`trian.epochs` for `trian`); nullptr when there is none.
  const Override* first_within(const std::string& path) const;
};

// Applies "a.b=c" overrides onto `root` (the text named `source` in notes). Throws stoker::Error
// naming the --set for a malformed one.
AppliedOverrides apply_overrides(YAML::Node& root, const std::vector<std::string>& overrides,
                                 const std::string& source);

}  // namespace stoker
