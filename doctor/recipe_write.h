// `trainer doctor --tune --write FILE` (and `--in-place`): the measured values written into a recipe's
// text, line by line, so that its comments, key order and layout stay as the user wrote them.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace stoker {

struct TuneResult;   // doctor/doctor.h
struct BatchChoice;  // doctor/decisions.h

// One key to set: its dotted path (data.workers) and its value as YAML scalar text ("4", "raw", "0.2").
struct RecipeValue {
  std::string key;
  std::string value;
};

struct RecipeEdit {
  std::string text;                  // the recipe with the values written
  std::vector<std::string> changes;  // "data.workers: 0 -> 4", "data.cache: raw (added)", one per key that changed
};

// Writes `values` into `text` (a recipe in block-style YAML): a key that is there gets its value
// replaced on its own line (its comment kept, at the same column where it fits); a missing key is
// added at the end of its section, indented as the section's other keys; a missing section is
// appended. `comment` becomes a `# ` line above the first key of the recipe (after its leading
// comment block); a line left there by an earlier write of the same command (the comment's text up to
// its first comma) is replaced, so that tuning twice leaves one line. A section written in flow style
// (`data: {workers: 0}`) or a key whose value is a mapping or a list is an error naming `source`, the
// key and the line. Values equal to the text's are left alone (and not in `changes`).
RecipeEdit edit_recipe(const std::string& text, const std::vector<RecipeValue>& values, const std::string& comment,
                       const std::string& source);

// The values `--write` sets: from `tune` (when given) data.workers and data.prefetch_factor, on CUDA
// (`cuda`) data.device_prefetch, and data.cache unless it stays none; from `batch` (when it chose a
// size) data.batch_size, and optimizer.lr when its rule changes it.
std::vector<RecipeValue> tuned_values(const TuneResult* tune, const BatchChoice* batch, bool cuda);

// Reads the recipe at `recipe`, edits it (edit_recipe) and writes the result to `out` (atomically;
// `out` may be `recipe`), after checking that it loads as a config and holds each value where its key
// says. Returns the edit.
RecipeEdit write_recipe(const std::filesystem::path& recipe, const std::filesystem::path& out,
                        const std::vector<RecipeValue>& values, const std::string& comment);

}  // namespace stoker
