// models/weights/safetensors.h: reading and writing the Hugging Face format, checked against Python's
// safetensors package (SafetensorsPython) and against damaged files.
#include "models/weights/safetensors.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>

#include "models/weights/torch_save.h"
#include "test_util.h"

namespace stoker::models::weights {
namespace {
namespace fs = std::filesystem;
using testing::error_of;
using testing::TempDir;

NamedTensors sample_tensors() {
  torch::manual_seed(1);
  return {{"conv.weight", torch::randn({4, 3, 3, 3})},
          {"half", torch::randn({5, 2}).to(torch::kHalf)},
          {"bf16", torch::randn({7}).to(torch::kBFloat16)},
          {"steps", torch::arange(6, torch::kInt64).reshape({2, 3})},
          {"mask", torch::tensor({true, false, true})},
          {"scalar", torch::tensor(2.5)},
          {"empty", torch::zeros({0, 4})},
          {"strided", torch::arange(12, torch::kFloat).reshape({3, 4}).t()}};  // not contiguous
}

void expect_same(const NamedTensors& got, const NamedTensors& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first);
    EXPECT_EQ(got[i].second.scalar_type(), want[i].second.scalar_type()) << want[i].first;
    EXPECT_TRUE(torch::equal(got[i].second, want[i].second.contiguous())) << want[i].first;
  }
}

TEST(Safetensors, WhatItWritesItReadsBackInOrderWithDtypesAndShapes) {
  TempDir tmp;
  const NamedTensors tensors = sample_tensors();
  const std::string bytes = safetensors_bytes(tensors, {{"format", "pt"}});
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u) << "the header is padded to 8 bytes";
  EXPECT_EQ(bytes[8], '{');
  testing::write_bytes(tmp / "w.safetensors", bytes);
  expect_same(read_safetensors(tmp / "w.safetensors"), tensors);
}

// Damaged files are errors naming the file and what is wrong, never reads outside it.
TEST(Safetensors, DamagedFilesAreErrorsThatSayWhat) {
  TempDir tmp;
  const std::string good = safetensors_bytes({{"a", torch::ones({4})}, {"b", torch::zeros({2, 2})}});
  const fs::path file = tmp / "bad.safetensors";
  const auto message = [&](const std::string& bytes) {
    testing::write_bytes(file, bytes);
    return error_of([&] { read_safetensors(file); });
  };
  EXPECT_CONTAINS(message(good.substr(0, good.size() - 3)), "is truncated");
  EXPECT_CONTAINS(message(good + "xyz"), "followed by extra bytes");
  EXPECT_CONTAINS(message(good.substr(0, 5)), "too short for the 8-byte header length");
  std::string huge = good;
  huge[7] = '\x7f';  // a header length of petabytes
  EXPECT_CONTAINS(message(huge), "its header length says");
  const auto with_header = [](const std::string& json, size_t data) {
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
    return out + json + std::string(data, '\0');
  };
  EXPECT_CONTAINS(message(with_header("{not json", 0)), "its header is not valid JSON");
  EXPECT_CONTAINS(message(with_header(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", 4)),
                  "has data_offsets [0, 4] (4 bytes), but its shape and dtype take 8 bytes");
  EXPECT_CONTAINS(message(with_header(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                                          "b": {"dtype": "F32", "shape": [1], "data_offsets": [2, 6]}})",
                                      6)),
                  "tensors overlap or leave gaps");
  EXPECT_CONTAINS(message(with_header(R"({"a": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 1]}})", 1)),
                  "tensor 'a' has dtype \"Q7\", which Stoker does not read");
  EXPECT_CONTAINS(message(with_header(R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4)),
                  "has a shape that is not a list of sizes");
  EXPECT_CONTAINS(message(with_header(R"({"a": {"dtype": "F32", "shape": [1]}})", 4)), "has no data_offsets");
  EXPECT_CONTAINS(error_of([&] { read_safetensors(tmp / "missing.safetensors"); }), "does not exist");
}

// Python's safetensors package writes what Stoker reads, and reads what Stoker writes.
TEST(SafetensorsPython, PythonsFilesReadAndStokersFilesLoadInPython) {
  std::string why;
  const fs::path python = testing::venv_python(&why);
  if (python.empty()) GTEST_SKIP() << why;
  if (testing::shell("'" + python.string() + "' -c 'import safetensors' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "safetensors is not installed in " << python.string() << "; install it with `bash bench/setup.sh`";
  }
  TempDir tmp;
  const std::string script = std::string(STOKER_SOURCE_DIR) + "/tests/models/finetune_python.py";
  const std::string run = "'" + python.string() + "' '" + script + "' ";
  ASSERT_EQ(testing::shell(run + "safetensors-write '" + tmp.path().string() + "'"), 0);
  // Python's safetensors orders the header by name; the expected dict comes in insertion order.
  NamedTensors got = read_safetensors(tmp / "python.safetensors");
  const c10::IValue expected = read_torch_save(tmp / "python_expected.pt");
  ASSERT_EQ(got.size(), expected.toGenericDict().size());
  for (const auto& [key, tensor] : got) {
    const at::Tensor want = expected.toGenericDict().at(key).toTensor();
    EXPECT_EQ(tensor.scalar_type(), want.scalar_type()) << key;
    EXPECT_TRUE(torch::equal(tensor, want)) << key;
  }
  const NamedTensors mine = sample_tensors();
  testing::write_bytes(tmp / "stoker.safetensors", safetensors_bytes(mine, {{"format", "pt"}}));
  testing::write_bytes(tmp / "stoker_expected.pt", torch_save_bytes(mine));
  EXPECT_EQ(testing::shell(run + "safetensors-check '" + (tmp / "stoker.safetensors").string() + "' '" +
                           (tmp / "stoker_expected.pt").string() + "'"),
            0);
}

}  // namespace
}  // namespace stoker::models::weights
