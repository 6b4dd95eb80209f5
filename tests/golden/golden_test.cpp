// Extra, live: the checked-in golden headers (tests/golden/*_golden.h) are what their generators
// write with the libtorch venv's PyTorch today, so that nobody edits one by hand or changes a
// generator without regenerating. Skipped, saying why, without the venv's Python (or torchvision,
// for the ResNet header). The tests that use the headers need no Python.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>

#include "test_util.h"

namespace stoker {
namespace {
namespace fs = std::filesystem;

// The header without its first line, which names the torch version that wrote it.
std::string without_first_line(const std::string& text) {
  const auto end = text.find('\n');
  return end == std::string::npos ? "" : text.substr(end + 1);
}

// The first line at which two texts differ, 1-based, with both versions of it.
std::string first_difference(const std::string& a, const std::string& b) {
  std::istringstream in_a(a), in_b(b);
  std::string line_a, line_b;
  for (int line = 1;; ++line) {
    const bool more_a = static_cast<bool>(std::getline(in_a, line_a));
    const bool more_b = static_cast<bool>(std::getline(in_b, line_b));
    if (!more_a && !more_b) return "none";
    if (!more_a || !more_b || line_a != line_b) {
      return "line " + std::to_string(line + 1) + ":\n  checked in: " + (more_a ? line_a : "(end)") +
             "\n  generated:  " + (more_b ? line_b : "(end)");
    }
  }
}

class GoldenHeadersPython : public ::testing::TestWithParam<const char*> {};

TEST_P(GoldenHeadersPython, CheckedInHeaderIsWhatItsGeneratorWrites) {
  const std::string name = GetParam();
  std::string why;
  const fs::path python = testing::venv_python(&why);
  if (python.empty()) GTEST_SKIP() << why;
  if (name == "resnet" && testing::shell("'" + python.string() + "' -c 'import torchvision' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "torchvision is not installed in " << python.string() << "; install it with `bash bench/setup.sh`";
  }
  const fs::path folder = fs::path(STOKER_SOURCE_DIR) / "tests" / "golden";
  const fs::path script = folder / (name + "_golden.py");
  const fs::path checked_in = folder / (name + "_golden.h");
  testing::TempDir tmp;
  const fs::path generated = tmp / (name + "_golden.h");
  const fs::path log = tmp / "generator.log";
  const std::string command = "'" + python.string() + "' '" + script.string() + "' '" + generated.string() +
                              "' >'" + log.string() + "' 2>&1";
  ASSERT_EQ(testing::shell(command), 0) << command << "\n" << testing::read_bytes(log);
  const std::string want = without_first_line(testing::read_bytes(checked_in));
  const std::string got = without_first_line(testing::read_bytes(generated));
  ASSERT_FALSE(got.empty()) << generated;
  EXPECT_EQ(want, got) << checked_in << " differs from what " << script
                       << " writes now; regenerate it (see tests/golden/README.md). First difference at "
                       << first_difference(want, got);
}

INSTANTIATE_TEST_SUITE_P(Golden, GoldenHeadersPython, ::testing::Values("optim", "schedule", "resnet"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

}  // namespace
}  // namespace stoker
