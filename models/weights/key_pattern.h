// Patterns over parameter and buffer names (state-dict keys): what model.pretrained_skip,
// model.freeze and a model type's head keys are written in.
//
// A pattern is a glob over the dotted key (`*` any run of characters, dots included; `?` one
// character) that matches a key when it matches the whole key or a whole dotted prefix of it:
// `fc` and `fc.` match `fc.weight` and `fc.bias` but not `fc2.weight`; `layer1` matches every key
// under `layer1.` (not `layer10.`); `layer[12]` is not special (no character classes): write
// `layer1` and `layer2`; `*.bn1` matches every block's first batch norm; `*running_*` every
// running statistic. Matching is case-sensitive, as the keys are.
#pragma once

#include <string>
#include <vector>

namespace stoker::models::weights {

// Whether `pattern` matches `key` (as a whole, or a whole dotted prefix of it).
bool key_matches(const std::string& pattern, const std::string& key);
// Whether any of `patterns` matches `key`.
bool key_matches_any(const std::vector<std::string>& patterns, const std::string& key);

// The patterns of `patterns` that match none of `keys` (to name them in an error: a pattern that
// matches nothing is a typo more often than not).
std::vector<std::string> unmatched_patterns(const std::vector<std::string>& patterns,
                                            const std::vector<std::string>& keys);

// At most `shown` items joined with ", ", then "and N more" (for errors listing keys).
std::string list_some(const std::vector<std::string>& items, size_t shown = 10);

}  // namespace stoker::models::weights
