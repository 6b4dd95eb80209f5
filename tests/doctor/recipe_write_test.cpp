// doctor/recipe_write.h: measured values written into a recipe's text, its comments and order kept.
#include "doctor/recipe_write.h"

#include <algorithm>
#include <sstream>

#include <gtest/gtest.h>
#include <fmt/format.h>

#include "recipe/config.h"
#include "test_util.h"

namespace stoker {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Whether `sub` appears in `all` in order (other lines may come between).
bool in_order(const std::vector<std::string>& sub, const std::vector<std::string>& all) {
  auto at = all.begin();
  for (const std::string& line : sub) {
    at = std::find(at, all.end(), line);
    if (at == all.end()) return false;
    ++at;
  }
  return true;
}

std::string starved_toy() {
  return stoker::testing::read_bytes(std::string(STOKER_SOURCE_DIR) + "/configs/starved_toy.yaml");
}

const char* kStamp = "trainer doctor --tune, 2026-11-26 UTC, measured on cpu (2 cores): 405.3 samples/s";

TEST(RecipeWrite, KeepsCommentsAndOrderChangesValuesAndAddsMissingKeys) {
  const std::string text = starved_toy();
  const RecipeEdit e = edit_recipe(text,
                                   {{"data.workers", "2"}, {"data.cache", "raw"}, {"optimizer.lr", "0.1"},
                                    {"data.batch_size", "128"}, {"data.prefetch_factor", "2"}},
                                   kStamp, "starved_toy.yaml");
  const std::vector<std::string> before = lines_of(text), after = lines_of(e.text);
  // Every line of the recipe but the three changed is still there, in its order.
  std::vector<std::string> kept;
  for (const std::string& line : before) {
    if (line.rfind("  workers:", 0) != 0 && line.rfind("  lr:", 0) != 0 && line.rfind("  batch_size:", 0) != 0) {
      kept.push_back(line);
    }
  }
  EXPECT_TRUE(in_order(kept, after)) << e.text;
  EXPECT_EQ(after.size(), before.size() + 2) << e.text;  // data.cache and the stamp
  // The changed line keeps its comment at its column.
  EXPECT_TRUE(std::count(after.begin(), after.end(),
                         "  workers: 2                 # the starved setting; raise it to feed the model"))
      << e.text;
  // The missing key is added at the end of its section, at the section's indent.
  const auto std_line = std::find(after.begin(), after.end(), "  std: [0.25, 0.25, 0.25]");
  ASSERT_NE(std_line, after.end());
  EXPECT_EQ(*(std_line + 1), "  cache: raw");
  // The stamp is above the first key, below the recipe's own leading comments.
  const auto run = std::find(after.begin(), after.end(), "run:");
  ASSERT_NE(run, after.end());
  EXPECT_EQ(*(run - 1), std::string("# ") + kStamp);
  EXPECT_EQ(after[0], before[0]);
  // What changed, one line each; a value that was already there (prefetch_factor 2) is not a change.
  EXPECT_EQ(e.changes, (std::vector<std::string>{"data.workers: 0 -> 2", "data.cache: raw (added)",
                                                 "optimizer.lr: 0.05 -> 0.1", "data.batch_size: 64 -> 128"}));
  // The result loads as a recipe with the new values.
  const Config c = parse_config(e.text, "written.yaml");
  EXPECT_EQ(c.data.workers, 2);
  EXPECT_EQ(c.data.cache, data::DataCache::kRaw);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.1);
  EXPECT_EQ(c.data.batch_size, 128);
  EXPECT_EQ(c.data.dataset.as<data::SyntheticOptions>().cpu_cost_us, 2000);  // untouched
}

TEST(RecipeWrite, WritingAgainChangesNothingAndLeavesOneStamp) {
  const std::vector<RecipeValue> values = {{"data.workers", "2"}, {"data.cache", "raw"}};
  const RecipeEdit once = edit_recipe(starved_toy(), values, kStamp, "starved_toy.yaml");
  const RecipeEdit twice = edit_recipe(once.text, values, kStamp, "starved_toy.yaml");
  EXPECT_TRUE(twice.changes.empty());
  EXPECT_EQ(twice.text, once.text);
  // Another command's stamp stays beside it.
  const RecipeEdit batch = edit_recipe(once.text, {{"data.batch_size", "64"}}, "trainer doctor --batch, 2026-11-27",
                                       "starved_toy.yaml");
  EXPECT_CONTAINS(batch.text, std::string("# ") + kStamp + "\n# trainer doctor --batch, 2026-11-27\nrun:");
}

TEST(RecipeWrite, MissingSectionsAndNestedKeysAreAdded) {
  const std::string text = "# a recipe\nrun:\n  name: x   # its name\n\ndata:\n  type: synthetic\n  synthetic:\n"
                           "    height: 8\n  # the loader\n  workers: 0\n";
  const RecipeEdit e = edit_recipe(text,
                                   {{"data.synthetic.width", "8"}, {"train.epochs", "3"}, {"logging.mlflow.experiment", "e"},
                                    {"run.name", "a_much_longer_name_than_before"}},
                                   "", "r.yaml");
  EXPECT_EQ(e.text,
            "# a recipe\nrun:\n  name: a_much_longer_name_than_before # its name\n\ndata:\n  type: synthetic\n"
            "  synthetic:\n    height: 8\n    width: 8\n  # the loader\n  workers: 0\n\ntrain:\n  epochs: 3\n\nlogging:\n"
            "  mlflow:\n    experiment: e\n");
}

TEST(RecipeWrite, FlowSectionsAndNonScalarKeysAreErrorsNamingTheLine) {
  const std::string flow = "run: {name: x}\ndata: {workers: 0, batch_size: 32}\n";
  EXPECT_CONTAINS(stoker::testing::error_of([&] { edit_recipe(flow, {{"data.workers", "2"}}, "", "flow.yaml"); }),
                  "flow.yaml: data at line 2 is written in flow style or holds a value ({workers: 0, batch_size: 32})");
  // The 1-based line of the recipe that starts with `prefix` (the recipe's comments may grow).
  const std::string toy = starved_toy();
  auto line_of = [&](const std::string& prefix) {
    const size_t at = toy.find("\n" + prefix);
    return at == std::string::npos ? -1 : 2 + std::count(toy.begin(), toy.begin() + static_cast<long>(at), '\n');
  };
  ASSERT_GT(line_of("  synthetic:"), 0);
  ASSERT_GT(line_of("  mean:"), 0);
  EXPECT_CONTAINS(stoker::testing::error_of([&] { edit_recipe(toy, {{"data.synthetic", "1"}}, "", "s.yaml"); }),
                  fmt::format("s.yaml: data.synthetic at line {} is a mapping or a list, not a value",
                              line_of("  synthetic:")));
  EXPECT_CONTAINS(stoker::testing::error_of([&] { edit_recipe(toy, {{"data.mean", "1"}}, "", "s.yaml"); }),
                  fmt::format("data.mean at line {} is a mapping or a list", line_of("  mean:")));
}

}  // namespace
}  // namespace stoker
