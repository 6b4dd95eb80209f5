// Helpers shared by the tests: temporary folders, IDX files and small synthetic data sets.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "common/error.h"

// Expects `text` to contain `part`, printing both when it does not.
#define EXPECT_CONTAINS(text, part)                                                          \
  EXPECT_NE(std::string(text).find(part), std::string::npos)                                 \
      << "'" << (text) << "' lacks '" << (part) << "'"

// A test that needs CUDA: skipped, saying why, where there is none; with STOKER_REQUIRE_CUDA=1 in the
// environment (a GPU machine's run, ../shared/GPU_CHECKLIST.md) that is a failure instead, so that a
// GPU pass that quietly skips cannot look green. `kernels`: it also needs Stoker's own CUDA kernels.
#define STOKER_NEEDS_CUDA() STOKER_NEEDS_CUDA_IMPL(false)
#define STOKER_NEEDS_CUDA_KERNELS() STOKER_NEEDS_CUDA_IMPL(true)
#define STOKER_NEEDS_CUDA_IMPL(kernels)                                                              \
  if (const std::string stoker_why_ = ::stoker::testing::cuda_missing(kernels); !stoker_why_.empty()) { \
    if (::stoker::testing::cuda_required()) {                                                          \
      FAIL() << stoker_why_ << "; STOKER_REQUIRE_CUDA=1 makes a skipped GPU test a failure";          \
    }                                                                                                  \
    GTEST_SKIP() << stoker_why_;                                                                       \
  }

// A test that needs `n` CUDA devices (NCCL, one per rank), after STOKER_NEEDS_CUDA(): skipped on a
// machine with fewer, whatever STOKER_REQUIRE_CUDA says, with the fixed phrase "needs N CUDA devices"
// (also recorded as the test's property `skip_reason`) that scripts/gpu_pass_summary.py lists as "not
// applicable" on that machine; a skip saying anything else still fails the GPU pass.
#define STOKER_NEEDS_CUDA_DEVICES(n)                                                          \
  if (const std::string stoker_why_ = ::stoker::testing::cuda_devices_missing(n); !stoker_why_.empty()) { \
    RecordProperty("skip_reason", stoker_why_);                                                   \
    GTEST_SKIP() << stoker_why_;                                                              \
  }

namespace stoker::testing {

// "needs N CUDA devices (this machine has M)" when it has fewer than `n`, else "".
std::string cuda_devices_missing(int64_t n);

// Why a CUDA test cannot run here ("" when it can): no GPU, libtorch without CUDA, or (`kernels`)
// this build without Stoker's CUDA parts.
std::string cuda_missing(bool kernels = false);
// Whether STOKER_REQUIRE_CUDA=1 is set.
bool cuda_required();

// Runs `f` and returns the message of the stoker::Error it throws (fails the test if none).
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no stoker::Error thrown";
  return "";
}

// Every batch of epoch `epoch` of `source`, from batch `first` on: anything with start_epoch(epoch,
// first) and a next() that returns an optional (a data::Loader, any data::BatchSource, a data::Sampler).
template <typename Source>
auto epoch_of(Source& source, int64_t epoch, int64_t first = 0) {
  source.start_epoch(epoch, first);
  std::vector<std::decay_t<decltype(*source.next())>> out;
  while (auto b = source.next()) out.push_back(*b);
  return out;
}

// A fresh folder under the system temp dir, removed when the object goes away.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// Writes an IDX file of unsigned bytes (gzipped when `gzip`).
void write_idx(const std::filesystem::path& path, const std::vector<uint32_t>& dims,
               const std::vector<uint8_t>& data, bool gzip);

// Writes an 8-bit PNG (channels 1 or 3) of HWC pixels.
void write_png(const std::filesystem::path& path, int64_t height, int64_t width, int64_t channels,
               const std::vector<uint8_t>& pixels);

// Writes bytes as they are.
void write_bytes(const std::filesystem::path& path, const std::string& bytes);
std::string read_bytes(const std::filesystem::path& path);

// The libtorch venv's Python, through which tests compare with PyTorch itself; empty, with `why`
// saying what is missing and how to get it, when there is none.
std::filesystem::path venv_python(std::string* why);

// A TCP port on 127.0.0.1 that was free a moment ago.
int free_port();

// Runs `command` with /bin/sh; returns its exit status (-1 when it did not exit normally).
int shell(const std::string& command);

// Writes train-/t10k- image and label IDX files of a learnable 10-class problem: each class has a
// fixed random template, each sample is its template plus noise. Images are size x size.
void write_synthetic_idx_dataset(const std::filesystem::path& root, int64_t train, int64_t test,
                                 int64_t size, uint64_t seed = 1);


// The source tree and the trainer program the tests use: the environment variables
// STOKER_SOURCE_DIR and STOKER_TRAINER_BIN when set (a build run elsewhere, e.g. on a GPU machine
// through scripts/bundle_device.sh), else the paths compiled in by tests/CMakeLists.txt.
inline constexpr const char* kBuiltSourceDir = STOKER_SOURCE_DIR;
inline constexpr const char* kBuiltTrainerBin = STOKER_TRAINER_BIN;
const char* source_dir();
const char* trainer_bin();

}  // namespace stoker::testing

// The tests name the two through these macros; from here on they honour the environment.
#undef STOKER_SOURCE_DIR
#define STOKER_SOURCE_DIR (::stoker::testing::source_dir())
#undef STOKER_TRAINER_BIN
#define STOKER_TRAINER_BIN (::stoker::testing::trainer_bin())
