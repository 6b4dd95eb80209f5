// Writing measured values into a recipe's text line by line (recipe_write.h): comments, order and
// layout stay; only the lines of the keys set change, or are added.
#include "doctor/recipe_write.h"

#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <yaml-cpp/yaml.h>

#include "common/atomic_write.h"
#include "common/error.h"
#include "doctor/decisions.h"
#include "doctor/doctor.h"
#include "recipe/config.h"

namespace stoker {
namespace {

using Lines = std::vector<std::string>;

size_t indent_of(const std::string& line) {
  const size_t first = line.find_first_not_of(' ');
  return first == std::string::npos ? line.size() : first;
}

// A line that holds YAML (not blank, not only a comment, not a document marker).
bool is_content(const std::string& line) {
  const size_t first = line.find_first_not_of(" \t");
  if (first == std::string::npos || line[first] == '#') return false;
  return line.compare(first, 3, "---") != 0 || line.size() > first + 3;
}

// Where a trailing `# comment` starts in `s` (a '#' at the start or after a blank, outside quotes).
size_t comment_start(const std::string& s) {
  char quote = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (quote != 0) {
      if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '#' && (i == 0 || s[i - 1] == ' ' || s[i - 1] == '\t')) {
      return i;
    }
  }
  return std::string::npos;
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t") - a + 1);
}

// A `name: ...` line at `indent`: the name.
std::optional<std::string> key_of(const std::string& line, size_t indent) {
  if (!is_content(line) || indent_of(line) != indent || line.compare(indent, 2, "- ") == 0) return std::nullopt;
  const size_t colon = line.find(':', indent);
  if (colon == std::string::npos || (colon + 1 < line.size() && line[colon + 1] != ' ' && line[colon + 1] != '\t')) {
    return std::nullopt;
  }
  return line.substr(indent, colon - indent);
}

// The value text of a `name: value  # comment` line (without the comment).
std::string value_of(const std::string& line) {
  const std::string rest = line.substr(line.find(':', indent_of(line)) + 1);
  return trim(rest.substr(0, comment_start(rest)));
}

// One past the last line of the block under the key at `at`: the next content line indented no deeper.
size_t block_end(const Lines& lines, size_t at) {
  const size_t indent = indent_of(lines[at]);
  for (size_t i = at + 1; i < lines.size(); ++i) {
    if (is_content(lines[i]) && indent_of(lines[i]) <= indent) return i;
  }
  return lines.size();
}

// The indent of the keys in [begin, end) (that of its first content line); `fallback` when it has none.
size_t child_indent(const Lines& lines, size_t begin, size_t end, size_t fallback) {
  for (size_t i = begin; i < end; ++i) {
    if (is_content(lines[i])) return indent_of(lines[i]);
  }
  return fallback;
}

std::vector<std::string> split_path(const std::string& key) {
  std::vector<std::string> parts;
  std::stringstream in(key);
  for (std::string part; std::getline(in, part, '.');) parts.push_back(part);
  return parts;
}

// `value` written into the line of an existing key, its comment kept at its column where it fits.
std::string replaced(const std::string& line, const std::string& value) {
  const size_t colon = line.find(':', indent_of(line));
  const std::string head = line.substr(0, colon + 1) + " " + value;
  const size_t comment = comment_start(line.substr(colon + 1));
  if (comment == std::string::npos) return head;
  const size_t column = colon + 1 + comment;
  return head + std::string(column > head.size() ? column - head.size() : 1, ' ') + line.substr(column);
}

struct Editor {
  Lines lines;
  const std::string& source;
  std::vector<std::string> changes;

  // Whether the key at `at` holds a mapping or a list on the lines below it (a list's items may sit at
  // the key's own indent).
  bool holds_block(size_t at) const {
    const size_t indent = indent_of(lines[at]);
    for (size_t i = at + 1; i < lines.size(); ++i) {
      if (!is_content(lines[i])) continue;
      return indent_of(lines[i]) > indent || (indent_of(lines[i]) == indent && lines[i].compare(indent, 1, "-") == 0);
    }
    return false;
  }

  std::string where(const std::string& path, size_t line) const {
    return fmt::format("{}: {} at line {}", source, path, line + 1);
  }

  void set(const RecipeValue& v) {
    const std::vector<std::string> parts = split_path(v.key);
    STOKER_CHECK(!parts.empty(), "{}: an empty key to write", source);
    size_t begin = 0, end = lines.size(), parent = 0;  // the block searched and the line of its key
    bool top = true;
    for (size_t depth = 0; depth < parts.size(); ++depth) {
      const std::string path = fmt::format("{}", fmt::join(parts.begin(), parts.begin() + depth + 1, "."));
      const size_t indent = child_indent(lines, begin, end, top ? 0 : indent_of(lines[parent]) + 2);
      std::optional<size_t> found;
      for (size_t i = begin; i < end && !found; ++i) {
        if (key_of(lines[i], indent) == parts[depth]) found = i;
      }
      if (!found) return add(parts, depth, indent, top ? lines.size() : end, top, v.value);
      const std::string value = value_of(lines[*found]);
      const bool last = depth + 1 == parts.size();
      if (!last) {
        STOKER_CHECK(value.empty(), "{} is written in flow style or holds a value ({}); --write edits block-style "
                     "sections only: set {}: {} there by hand", where(path, *found), value, v.key, v.value);
      } else {
        const bool has_block = holds_block(*found);
        STOKER_CHECK(!(value.empty() && has_block) && value.find_first_of("{[") != 0,
                     "{} is a mapping or a list, not a value; --write sets values only", where(path, *found));
        if (value != v.value) {
          changes.push_back(fmt::format("{}: {} -> {}", v.key, value.empty() ? "(empty)" : value, v.value));
          lines[*found] = replaced(lines[*found], v.value);
        }
        return;
      }
      top = false;
      parent = *found;
      begin = *found + 1;
      end = block_end(lines, *found);
    }
  }

  // Adds parts[depth..] (the rest of the path) as nested keys, inserted after the last content line of
  // [.., end) (for a top-level key: at the end of the text).
  void add(const std::vector<std::string>& parts, size_t depth, size_t indent, size_t end, bool top,
           const std::string& value) {
    size_t at = end;
    if (!top) {
      while (at > 0 && !is_content(lines[at - 1])) --at;
    } else if (!lines.empty() && !trim(lines.back()).empty()) {
      lines.push_back("");
      ++at;
    }
    Lines added;
    for (size_t d = depth; d < parts.size(); ++d) {
      const std::string pad(indent + 2 * (d - depth), ' ');
      added.push_back(d + 1 == parts.size() ? pad + parts[d] + ": " + value : pad + parts[d] + ":");
    }
    lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(at), added.begin(), added.end());
    changes.push_back(fmt::format("{}: {} (added)", fmt::format("{}", fmt::join(parts, ".")), value));
  }

  // `comment` above the first content line, replacing a line of the same command from an earlier write.
  void stamp(const std::string& comment) {
    const std::string prefix = "# " + comment.substr(0, comment.find(',') + 1);
    size_t first = 0;
    while (first < lines.size() && !is_content(lines[first])) {
      if (comment.find(',') != std::string::npos && lines[first].rfind(prefix, 0) == 0) {
        lines.erase(lines.begin() + static_cast<std::ptrdiff_t>(first));
      } else {
        ++first;
      }
    }
    lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(first), "# " + comment);
  }
};

}  // namespace

RecipeEdit edit_recipe(const std::string& text, const std::vector<RecipeValue>& values, const std::string& comment,
                       const std::string& source) {
  Editor e{{}, source, {}};
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    e.lines.push_back(line);
  }
  for (const RecipeValue& v : values) e.set(v);
  if (!comment.empty()) e.stamp(comment);
  RecipeEdit out;
  for (const std::string& line : e.lines) out.text += line + "\n";
  out.changes = std::move(e.changes);
  return out;
}

std::vector<RecipeValue> tuned_values(const TuneResult* tune, const BatchChoice* batch, bool cuda) {
  std::vector<RecipeValue> values;
  if (tune != nullptr) {
    values.push_back({"data.workers", std::to_string(tune->best.workers)});
    values.push_back({"data.prefetch_factor", std::to_string(tune->best.prefetch_factor)});
    if (cuda) values.push_back({"data.device_prefetch", std::to_string(tune->best.device_prefetch)});
    if (tune->best.cache != data::DataCache::kNone || tune->start.cache != data::DataCache::kNone) {
      values.push_back({"data.cache", data_cache_name(tune->best.cache)});
    }
  }
  if (batch != nullptr && batch->batch_size > 0) {
    values.push_back({"data.batch_size", std::to_string(batch->batch_size)});
    if (batch->lr.changed) values.push_back({"optimizer.lr", fmt::format("{:.4g}", batch->lr.lr)});
  }
  return values;
}

RecipeEdit write_recipe(const std::filesystem::path& recipe, const std::filesystem::path& out,
                        const std::vector<RecipeValue>& values, const std::string& comment) {
  std::ifstream in(recipe, std::ios::binary);
  STOKER_CHECK(in.good(), "cannot read the recipe {} to write the tuned values into", recipe.string());
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  RecipeEdit edit = edit_recipe(text, values, comment, recipe.string());
  parse_config(edit.text, out.string() + " (as written)");  // throws, naming the key, if it does not load
  const YAML::Node root = YAML::Load(edit.text);
  for (const RecipeValue& v : values) {
    YAML::Node node = root;
    bool there = true;
    for (const std::string& part : split_path(v.key)) {
      const YAML::Node& parent = node;
      const YAML::Node child = parent.IsMap() ? parent[part] : YAML::Node();
      there = there && parent.IsMap() && child.IsDefined();
      if (!there) break;
      node.reset(child);
    }
    STOKER_CHECK(there && node.IsScalar() && node.Scalar() == YAML::Load(v.value).Scalar(),
                 "{}: {} did not come out as {} (a recipe layout --write does not understand); nothing written",
                 recipe.string(), v.key, v.value);
  }
  write_file_atomically(out, edit.text);
  return edit;
}

}  // namespace stoker
