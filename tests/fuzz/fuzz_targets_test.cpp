// The fuzz targets (fuzz/fuzz_targets.h) without libFuzzer: every seed of the corpus and every input
// that once crashed a parser (fuzz/regressions/<target>/) runs through its target on each test run.
// A target aborts on a broken invariant and lets any error but stoker::Error escape, so a parser
// that regresses fails here. The crashes themselves also have tests of their own, beside the
// parser's other tests, that check the error message.
#include <filesystem>
#include <fstream>
#include <ostream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fuzz/fuzz_targets.h"
#include "test_util.h"

namespace stoker::fuzz {
// gtest prints a failing parameter by its name.
void PrintTo(const Target& target, std::ostream* os) { *os << target.name; }

namespace {
namespace fs = std::filesystem;

std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> files;
  if (!fs::is_directory(dir)) return files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  return files;
}

std::string bytes_of(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class FuzzReplay : public ::testing::TestWithParam<Target> {};

TEST_P(FuzzReplay, SeedsAndPastCrashesPass) {
  const fs::path root = fs::path(STOKER_SOURCE_DIR) / "fuzz";
  const std::vector<fs::path> seeds = files_in(root / "corpus" / GetParam().name);
  EXPECT_FALSE(seeds.empty()) << "no seed corpus in " << (root / "corpus" / GetParam().name);
  std::vector<fs::path> inputs = seeds;
  for (const auto& f : files_in(root / "regressions" / GetParam().name)) inputs.push_back(f);
  for (const auto& file : inputs) {
    SCOPED_TRACE(file.string());
    const std::string data = bytes_of(file);
    GetParam().run(reinterpret_cast<const uint8_t*>(data.data()), data.size());
  }
}

INSTANTIATE_TEST_SUITE_P(EveryTarget, FuzzReplay, ::testing::ValuesIn(targets()),
                         [](const ::testing::TestParamInfo<Target>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace stoker::fuzz
