#include "data/idx.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <functional>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/error.h"
#include "test_util.h"

namespace stoker::data {
namespace {
using stoker::testing::error_of;
using stoker::testing::TempDir;
using stoker::testing::write_bytes;
using stoker::testing::write_idx;

// Runs `f` in a forked child whose address space may grow by at most `headroom` bytes beyond what
// this process has mapped now (RLIMIT_AS), so that an allocation a file's header asks for fails
// instead of being granted lazily. Returns the child's exit status: 0 when `f` threw
// stoker::Error, 1 when it returned, 2 for any other exception (an allocation refused under the
// limit shows as c10::Error or std::bad_alloc), 128 + the signal that ended it.
int outcome_with_memory_headroom(size_t headroom, const std::function<void()>& f) {
  long pages = 0;  // the first field of /proc/self/statm: the address space mapped, in pages
  std::ifstream("/proc/self/statm") >> pages;
  const pid_t child = fork();
  if (child == 0) {
    const rlim_t mapped = static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE));
    const rlimit limit{mapped + headroom, mapped + headroom};
    if (setrlimit(RLIMIT_AS, &limit) != 0) _exit(3);
    try {
      f();
    } catch (const Error&) {
      _exit(0);
    } catch (...) {
      _exit(2);
    }
    _exit(1);
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::vector<uint8_t> iota_bytes(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7);
  return v;
}

TEST(ReadIdx, ReadsRawAndGzippedFilesAlike) {
  TempDir dir;
  const auto data = iota_bytes(3 * 4 * 5);
  write_idx(dir / "raw", {3, 4, 5}, data, false);
  write_idx(dir / "packed.gz", {3, 4, 5}, data, true);
  for (const char* name : {"raw", "packed.gz"}) {
    torch::Tensor t = read_idx(dir / name);
    ASSERT_EQ(t.sizes(), (std::vector<int64_t>{3, 4, 5})) << name;
    EXPECT_EQ(t.scalar_type(), torch::kUInt8);
    EXPECT_EQ(std::vector<uint8_t>(t.data_ptr<uint8_t>(), t.data_ptr<uint8_t>() + t.numel()), data);
  }
}

TEST(ReadIdx, RejectsTruncatedRawFile) {
  TempDir dir;
  write_idx(dir / "full", {10, 4, 4}, iota_bytes(160), false);
  std::string bytes = stoker::testing::read_bytes(dir / "full");
  write_bytes(dir / "cut", bytes.substr(0, bytes.size() - 50));
  const std::string msg = error_of([&] { read_idx(dir / "cut"); });
  EXPECT_CONTAINS(msg, (dir / "cut").string());
  EXPECT_CONTAINS(msg, "truncated IDX file");
  EXPECT_CONTAINS(msg, "160 bytes of data (10x4x4)");
  EXPECT_CONTAINS(msg, "only 110 could be read");
}

TEST(ReadIdx, RejectsTruncatedGzipStream) {
  TempDir dir;
  write_idx(dir / "full.gz", {200, 8, 8}, iota_bytes(200 * 64), true);
  std::string bytes = stoker::testing::read_bytes(dir / "full.gz");
  write_bytes(dir / "cut.gz", bytes.substr(0, bytes.size() / 2));
  const std::string msg = error_of([&] { read_idx(dir / "cut.gz"); });
  EXPECT_CONTAINS(msg, "cut.gz");
  EXPECT_TRUE(msg.find("truncated IDX file") != std::string::npos ||
              msg.find("corrupt compressed data") != std::string::npos)
      << msg;
}

TEST(ReadIdx, RejectsCorruptGzipData) {
  TempDir dir;
  write_idx(dir / "full.gz", {50, 8, 8}, iota_bytes(50 * 64), true);
  std::string bytes = stoker::testing::read_bytes(dir / "full.gz");
  for (size_t i = 20; i < bytes.size() - 10; i += 3) bytes[i] = static_cast<char>(bytes[i] ^ 0x5a);
  write_bytes(dir / "bad.gz", bytes);
  const std::string msg = error_of([&] { read_idx(dir / "bad.gz"); });
  EXPECT_CONTAINS(msg, "bad.gz");
}

TEST(ReadIdx, RejectsWrongMagicTypeAndTrailingBytes) {
  TempDir dir;
  write_bytes(dir / "text", "hello, this is not an idx file");
  EXPECT_CONTAINS(error_of([&] { read_idx(dir / "text"); }), "not an IDX file");

  write_bytes(dir / "floats", std::string("\0\0\x0d\x01\0\0\0\x01" "abcd", 12));
  EXPECT_CONTAINS(error_of([&] { read_idx(dir / "floats"); }), "element type 0x0d is not supported");

  write_idx(dir / "long", {4}, iota_bytes(4), false);
  write_bytes(dir / "long", stoker::testing::read_bytes(dir / "long") + "extra");
  EXPECT_CONTAINS(error_of([&] { read_idx(dir / "long"); }), "longer than its IDX header says");

  write_bytes(dir / "empty", "");
  EXPECT_CONTAINS(error_of([&] { read_idx(dir / "empty"); }), "no 4-byte header");
}

// Found by fuzz_idx (fuzz/regressions/idx/): a 25-byte gzip file whose header announced 2.6 GB of
// data made read_idx allocate all of it before reading any. Memory now grows with the data read,
// so under an address-space limit far below the claim the file fails as truncated, naming it.
TEST(ReadIdx, AHeaderClaimingHugeDataIsTruncatedWithoutAllocatingTheClaim) {
  TempDir dir;
  const std::string header("\0\0\x08\x03\x00\x00\x08\x00\x00\x00\x10\x00\x00\x00\x10\x00", 16);
  write_bytes(dir / "huge", header + "ten bytes.");  // 2048 x 4096 x 4096 claimed
  const std::string msg = error_of([&] { read_idx(dir / "huge"); });
  EXPECT_CONTAINS(msg, (dir / "huge").string());
  EXPECT_CONTAINS(msg, "truncated IDX file: the header announces 34359738368 bytes");
  EXPECT_CONTAINS(msg, "only 10 could be read");
  const auto fuzzed = std::filesystem::path(STOKER_SOURCE_DIR) / "fuzz/regressions/idx/oom-gzip-header-claims-2.6gb";
  for (const auto& file : {dir / "huge", fuzzed}) {
    EXPECT_EQ(outcome_with_memory_headroom(size_t(1) << 30, [&] { read_idx(file); }), 0) << file;
  }
}

// Found by fuzz_idx under UBSan (fuzz/regressions/idx/): three sizes below 2^31 whose product
// overflows int64 passed the element limit, which was checked after multiplying.
TEST(ReadIdx, DimensionsWhoseProductOverflowsAreACorruptHeader) {
  TempDir dir;
  write_bytes(dir / "overflow", std::string("\0\0\x08\x03\x00\x00\x04\x50\x01\x00\x04\x50\x45\x02\x3d\x0f", 16));
  EXPECT_CONTAINS(error_of([&] { read_idx(dir / "overflow"); }),
                  "header claims 1104x16778320x1157774607 elements; the header is corrupt");
  const auto fuzzed = std::filesystem::path(STOKER_SOURCE_DIR) / "fuzz/regressions/idx/crash-dimension-product-overflows";
  EXPECT_CONTAINS(error_of([&] { read_idx(fuzzed); }), "the header is corrupt");
}

TEST(ReadIdx, MissingFileSaysSo) {
  TempDir dir;
  EXPECT_CONTAINS(error_of([&] { read_idx(dir / "nope.gz"); }), "nope.gz: file not found");
}

TEST(LoadIdxSplit, LoadsImagesAndLabels) {
  TempDir dir;
  stoker::testing::write_synthetic_idx_dataset(dir.path(), 30, 20, 6);
  ImageSet set = load_idx_split(dir.path(), "train", 10);
  EXPECT_EQ(set.images.sizes(), (std::vector<int64_t>{30, 1, 6, 6}));
  EXPECT_EQ(set.labels.scalar_type(), torch::kInt64);
  EXPECT_EQ(set.labels[13].item<int64_t>(), 3);
}

TEST(LoadIdxSplit, MissingFolderAndFilesGiveAHint) {
  TempDir dir;
  EXPECT_CONTAINS(error_of([&] { load_idx_split(dir / "absent", "train", 10); }),
              "apt-get install dataset-fashion-mnist");
  const std::string msg = error_of([&] { load_idx_split(dir.path(), "train", 10); });
  EXPECT_CONTAINS(msg, "train-images-idx3-ubyte.gz");
  EXPECT_CONTAINS(msg, "set data.root");
}

TEST(LoadIdxSplit, RejectsMismatchedCountsAndLabelsOutOfRange) {
  TempDir dir;
  write_idx(dir / "train-images-idx3-ubyte", {5, 2, 2}, iota_bytes(20), false);
  write_idx(dir / "train-labels-idx1-ubyte", {4}, {0, 1, 2, 3}, false);
  EXPECT_CONTAINS(error_of([&] { load_idx_split(dir.path(), "train", 10); }),
              "holds 5 images but");

  write_idx(dir / "train-labels-idx1-ubyte", {5}, {0, 1, 12, 3, 4}, false);
  const std::string msg = error_of([&] { load_idx_split(dir.path(), "train", 10); });
  EXPECT_CONTAINS(msg, "label 12 of sample 2 is out of range for data.num_classes = 10");
}

}  // namespace
}  // namespace stoker::data
