// Patterns over state-dict keys (models/weights/key_pattern.h).
#include "models/weights/key_pattern.h"

#include <fmt/format.h>

namespace stoker::models::weights {
namespace {

// Whether the glob `p` matches all of `s` (`*`: any run, `?`: one character), iteratively with
// one back-tracking point, as fnmatch does for a pattern without classes.
bool glob(const std::string& p, const std::string& s) {
  size_t i = 0, j = 0, star = std::string::npos, mark = 0;
  while (j < s.size()) {
    if (i < p.size() && (p[i] == '?' || p[i] == s[j])) {
      ++i;
      ++j;
    } else if (i < p.size() && p[i] == '*') {
      star = i++;
      mark = j;
    } else if (star != std::string::npos) {
      i = star + 1;
      j = ++mark;
    } else {
      return false;
    }
  }
  while (i < p.size() && p[i] == '*') ++i;
  return i == p.size();
}

}  // namespace

bool key_matches(const std::string& pattern, const std::string& key) {
  std::string p = pattern;
  while (!p.empty() && p.back() == '.') p.pop_back();  // `fc.` means the module fc
  if (p.empty()) return false;
  if (glob(p, key)) return true;
  for (size_t dot = key.find('.'); dot != std::string::npos; dot = key.find('.', dot + 1)) {
    if (glob(p, key.substr(0, dot))) return true;
  }
  return false;
}

bool key_matches_any(const std::vector<std::string>& patterns, const std::string& key) {
  for (const std::string& p : patterns) {
    if (key_matches(p, key)) return true;
  }
  return false;
}

std::vector<std::string> unmatched_patterns(const std::vector<std::string>& patterns,
                                            const std::vector<std::string>& keys) {
  std::vector<std::string> out;
  for (const std::string& p : patterns) {
    bool any = false;
    for (const std::string& k : keys) {
      if ((any = key_matches(p, k))) break;
    }
    if (!any) out.push_back(p);
  }
  return out;
}

std::string list_some(const std::vector<std::string>& items, size_t shown) {
  std::string out;
  for (size_t i = 0; i < items.size() && i < shown; ++i) out += (i ? ", " : "") + items[i];
  if (items.size() > shown) out += fmt::format(" and {} more", items.size() - shown);
  return out;
}

}  // namespace stoker::models::weights
