// The tar header scanner and writer (data/tar.h) on archives built here byte by byte: ustar with a
// prefix, GNU long names and base-256 sizes, pax path/size records, v7 headers, and every kind of
// damage, which must be an error naming the archive and the byte offset.
#include "data/tar.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "common/error.h"
#include "test_util.h"

namespace stoker::data {
namespace {
using stoker::testing::error_of;

// One 512-byte header with a correct checksum. `magic`: "posix" (ustar\0 00), "gnu" (ustar  \0) or
// "v7" (none). `size_field`: the 12 bytes of the size field when given (base-256 tests).
std::string header(const std::string& name, char type, int64_t size, const std::string& magic = "posix",
                   const std::string& prefix = "", const std::string& size_field = "") {
  std::string h(512, '\0');
  std::memcpy(&h[0], name.data(), std::min<size_t>(name.size(), 100));
  std::memcpy(&h[100], "0000644", 7);
  const std::string size_text = size_field.empty() ? fmt::format("{:011o}", size) : size_field;
  std::memcpy(&h[124], size_text.data(), std::min<size_t>(size_text.size(), 12));
  std::memcpy(&h[136], "00000000000", 11);
  h[156] = type;
  if (magic == "posix") std::memcpy(&h[257], "ustar\0" "00", 8);
  if (magic == "gnu") std::memcpy(&h[257], "ustar  \0", 8);
  std::memcpy(&h[345], prefix.data(), std::min<size_t>(prefix.size(), 155));
  std::memset(&h[148], ' ', 8);
  int sum = 0;
  for (const char c : h) sum += static_cast<unsigned char>(c);
  const std::string checksum = fmt::format("{:06o}", sum);
  std::memcpy(&h[148], checksum.data(), 6);
  h[154] = '\0';
  return h;
}

std::string padded(const std::string& payload) {
  return payload + std::string((512 - payload.size() % 512) % 512, '\0');
}

std::string end_blocks() { return std::string(1024, '\0'); }

std::vector<TarMember> scan(const std::string& bytes) {
  return scan_tar(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "shard.tar");
}

std::string payload_of(const std::string& bytes, const TarMember& m) { return bytes.substr(m.offset, m.size); }

TEST(TarScan, WriterRoundTripsShortPrefixedAndPaxNames) {
  stoker::testing::TempDir dir;
  const std::string prefixed = std::string(120, 'd') + "/" + std::string(60, 'f') + ".jpg";
  const std::string unsplittable = std::string(150, 'x') + ".cls";
  std::FILE* f = std::fopen((dir / "a.tar").c_str(), "wb");
  ASSERT_NE(f, nullptr);
  TarWriter writer(f, "a.tar");
  writer.add("000.jpg", std::string(700, 'j'));
  writer.add("000.cls", "3");
  writer.add(prefixed, "p");
  writer.add(unsplittable, "");
  writer.finish();
  std::fclose(f);
  const std::string bytes = stoker::testing::read_bytes(dir / "a.tar");
  EXPECT_EQ(static_cast<int64_t>(bytes.size()), writer.bytes());
  const auto members = scan_tar_file((dir / "a.tar").string());
  ASSERT_EQ(members.size(), 4u);
  EXPECT_EQ(members[0].name, "000.jpg");
  EXPECT_EQ(members[0].offset, 512);
  EXPECT_EQ(payload_of(bytes, members[0]), std::string(700, 'j'));
  EXPECT_EQ(members[1].name, "000.cls");
  EXPECT_EQ(payload_of(bytes, members[1]), "3");
  EXPECT_EQ(members[2].name, prefixed);
  EXPECT_EQ(payload_of(bytes, members[2]), "p");
  EXPECT_EQ(members[3].name, unsplittable);
  EXPECT_EQ(members[3].size, 0);
  for (const auto& m : members) EXPECT_EQ(m.offset % 512, 0);
}

TEST(TarScan, GnuLongNamesBase256SizesAndSkippedEntries) {
  const std::string long_name = std::string(130, 'n') + ".png";
  std::string base256(12, '\0');
  base256[0] = static_cast<char>(0x80);
  base256[10] = 0x01;  // 0x0102 = 258 bytes
  base256[11] = 0x02;
  const std::string bytes = header("dir/", '5', 0, "gnu") + header("././@LongLink", 'L', long_name.size() + 1, "gnu") +
                            padded(long_name + '\0') + header(long_name.substr(0, 100), '0', 0, "gnu", "", base256) +
                            padded(std::string(258, 'x')) + header("link", '2', 0, "gnu") +
                            header("old.cls", '\0', 1, "v7") + padded("7") + end_blocks();
  const auto members = scan(bytes);
  ASSERT_EQ(members.size(), 2u);
  EXPECT_EQ(members[0].name, long_name);
  EXPECT_EQ(members[0].size, 258);
  EXPECT_EQ(payload_of(bytes, members[0]), std::string(258, 'x'));
  EXPECT_EQ(members[1].name, "old.cls");
  EXPECT_EQ(payload_of(bytes, members[1]), "7");
}

TEST(TarScan, PaxPathAndSizeRecordsApplyToTheNextMemberOnly) {
  const std::string records = "30 mtime=1700000000.123456789\n" "24 path=a/very/long.jpg\n" "12 size=300\n";
  const std::string bytes = header("./PaxHeaders/x", 'x', records.size()) + padded(records) +
                            header("short.jpg", '0', 0) + padded(std::string(300, 'y')) +
                            header("b.cls", '0', 2, "posix", "pre/fix") + padded("12") +
                            header("g", 'g', 12) + padded("12 size=999\n") + header("c.cls", '0', 1) + padded("5") +
                            end_blocks();
  const auto members = scan(bytes);
  ASSERT_EQ(members.size(), 3u);
  EXPECT_EQ(members[0].name, "a/very/long.jpg");
  EXPECT_EQ(members[0].size, 300);
  EXPECT_EQ(members[1].name, "pre/fix/b.cls");  // the ustar prefix
  EXPECT_EQ(members[1].size, 2);
  EXPECT_EQ(members[2].name, "c.cls");  // a global header changes nothing here
  EXPECT_EQ(members[2].size, 1);
}

TEST(TarScan, OneZeroBlockEndsTheArchiveAndAnEmptyArchiveHasNoMembers) {
  EXPECT_TRUE(scan(end_blocks()).empty());
  const auto members = scan(header("a.cls", '0', 1) + padded("1") + std::string(512, '\0'));
  ASSERT_EQ(members.size(), 1u);
}

TEST(TarScan, DamageIsAnErrorNamingTheArchiveAndTheOffset) {
  const std::string good = header("a.jpg", '0', 600) + padded(std::string(600, 'a')) + header("a.cls", '0', 1) +
                           padded("1") + end_blocks();
  ASSERT_EQ(scan(good).size(), 2u);
  // Cut inside the second member's payload: its size runs past the end of the file.
  EXPECT_CONTAINS(error_of([&] { scan(good.substr(0, 1536 + 100)); }), "shard.tar: the header at byte 1536 is cut off");
  EXPECT_CONTAINS(error_of([&] { scan(good.substr(0, 700)); }),
                  "shard.tar: member 'a.jpg' (header at byte 0) claims 600 bytes, but only 188 remain");
  // Cut right after a member: no end-of-archive blocks.
  EXPECT_CONTAINS(error_of([&] { scan(good.substr(0, 2560)); }), "ends at byte 2560 without the end-of-archive blocks");
  // One flipped bit in the second header.
  std::string flipped = good;
  flipped[1536 + 3] ^= 0x10;
  EXPECT_CONTAINS(error_of([&] { scan(flipped); }), "shard.tar: bad header checksum at byte 1536");
  // A size that is no number.
  const std::string bad_size = header("a.jpg", '0', 0, "posix", "", "12x4") + end_blocks();
  EXPECT_CONTAINS(error_of([&] { scan(bad_size); }), "the header at byte 0 has an unreadable size field");
  // Pax damage: a record whose length is wrong, a size that is no number, a header with no member after it.
  const std::string bad_record = header("p", 'x', 12) + padded("99 path=a\n  ") + header("a.jpg", '0', 0) + end_blocks();
  EXPECT_CONTAINS(error_of([&] { scan(bad_record); }), "malformed pax extended header at byte 0");
  const std::string bad_pax_size = header("p", 'x', 12) + padded("12 size=12x\n") + header("a.jpg", '0', 0) + end_blocks();
  EXPECT_CONTAINS(error_of([&] { scan(bad_pax_size); }), "pax size '12x' in the extended header at byte 0");
  const std::string dangling = header("p", 'x', 12) + padded("12 path=abc\n") + end_blocks();
  EXPECT_CONTAINS(error_of([&] { scan(dangling); }), "the extended header at byte 0 is followed by the end");
  const std::string huge_name = header("././@LongLink", 'L', int64_t(3) << 20) + std::string(int64_t(3) << 20, 'n');
  EXPECT_CONTAINS(error_of([&] { scan(huge_name); }), "the long-name header at byte 0 claims 3145728 bytes");
  std::string sparse = header("s.jpg", 'S', 0, "gnu") + end_blocks();
  EXPECT_CONTAINS(error_of([&] { scan(sparse); }), "is a GNU sparse file");
}

TEST(TarScan, GarbageIsAnErrorNeverACrash) {
  std::mt19937 rng(7);
  for (int n = 0; n < 200; ++n) {
    std::string bytes(static_cast<size_t>(rng() % 3000), '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    const std::string message = error_of([&] { scan(bytes); });
    EXPECT_CONTAINS(message, "shard.tar: ");
  }
}

TEST(TarScan, MissingFileIsAnError) {
  EXPECT_CONTAINS(error_of([] { scan_tar_file("/nonexistent/x.tar"); }), "/nonexistent/x.tar: cannot open");
}

}  // namespace
}  // namespace stoker::data
