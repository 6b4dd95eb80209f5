// WebDataset shards (data/webdataset.h): keys and samples, shard lists, the cached index and the
// data set, on shards written here (TarWriter), by Python's tarfile (pax and GNU formats) and by GNU
// tar (--format=gnu and --format=posix).
#include "data/webdataset.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "common/error.h"
#include "data/cache.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/pipeline.h"
#include "data/transform_options.h"
#include "test_util.h"

namespace stoker::data {
namespace {
namespace fs = std::filesystem;
using stoker::testing::error_of;
using stoker::testing::TempDir;

// Writes a shard of (member name, bytes) pairs in order.
void write_shard(const fs::path& path, const std::vector<std::pair<std::string, std::string>>& members) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  TarWriter writer(f, path.string());
  for (const auto& [name, bytes] : members) writer.add(name, bytes);
  writer.finish();
  std::fclose(f);
}

// A small PNG's bytes (3x2, RGB) whose first pixel is `value`.
std::string png_bytes(const fs::path& dir, uint8_t value) {
  const fs::path file = dir / "tmp.png";
  std::vector<uint8_t> pixels(3 * 2 * 3, 9);
  pixels[0] = value;
  stoker::testing::write_png(file, 2, 3, 3, pixels);
  return stoker::testing::read_bytes(file);
}

DatasetOptions webdataset_options(const std::string& shards, const std::string& split = "train") {
  DatasetOptions o;
  o.type = "webdataset";
  o.split = split;
  o.num_classes = 10;
  o.own = dataset_type_options("webdataset");
  auto& own = o.own.as<WebDatasetOptions>();
  (split == "train" ? own.shards : own.test_shards) = shards;
  return o;
}

TEST(WdsKeys, SplitAtTheFirstDotOfTheBaseNameAndSkipHiddenAndMetadata) {
  std::string key, ext;
  ASSERT_TRUE(split_member_name("a.b/n0144_10.seg.png", key, ext));
  EXPECT_EQ(key, "a.b/n0144_10");
  EXPECT_EQ(ext, "seg.png");
  EXPECT_FALSE(split_member_name("dir/.hidden.jpg", key, ext));
  EXPECT_FALSE(split_member_name("__key__", key, ext));
  EXPECT_FALSE(split_member_name("dir/__meta__", key, ext));
  EXPECT_FALSE(split_member_name("README", key, ext));
  EXPECT_FALSE(split_member_name("x.", key, ext));
}

TEST(WdsKeys, ConsecutiveMembersSharingAKeyMakeASample) {
  const std::vector<TarMember> members = {{"a.jpg", 512, 10}, {"a.cls", 1536, 1}, {".DS_Store", 2560, 4},
                                          {"b.cls", 3584, 1}, {"b.jpg", 4608, 7},  {"a.txt", 5632, 2}};
  const auto samples = group_samples(members, "s.tar");
  ASSERT_EQ(samples.size(), 3u);
  EXPECT_EQ(samples[0].key, "a");
  ASSERT_EQ(samples[0].members.size(), 2u);
  EXPECT_EQ(samples[0].find("cls")->offset, 1536);
  EXPECT_EQ(samples[1].key, "b");
  EXPECT_EQ(samples[1].find("jpg")->size, 7);
  EXPECT_EQ(samples[2].key, "a");  // not consecutive: another sample, as WebDataset reads it
  const std::vector<TarMember> twins = {{"a.jpg", 512, 10}, {"a.jpg", 1536, 1}};
  EXPECT_CONTAINS(error_of([&] { group_samples(twins, "s.tar"); }),
                  "s.tar: sample 'a' has two 'jpg' members (at bytes 512 and 1536)");
}

TEST(WdsShardList, BracesKeepZeroPaddingListsAndSeveralBracesMultiply) {
  EXPECT_EQ(expand_braces("t-{08..11}.tar"), (std::vector<std::string>{"t-08.tar", "t-09.tar", "t-10.tar", "t-11.tar"}));
  EXPECT_EQ(expand_braces("t-{000000..000002}.tar"),
            (std::vector<std::string>{"t-000000.tar", "t-000001.tar", "t-000002.tar"}));
  EXPECT_EQ(expand_braces("{a,b}-{1..2}.tar"), (std::vector<std::string>{"a-1.tar", "a-2.tar", "b-1.tar", "b-2.tar"}));
  EXPECT_EQ(expand_braces("{x}.tar"), (std::vector<std::string>{"{x}.tar"}));
  EXPECT_CONTAINS(error_of([] { expand_braces("t-{1..3.tar"); }), "a '{' without its '}'");
  EXPECT_CONTAINS(error_of([] { expand_braces("t-{0..99999999}.tar"); }), "more than 10 million shards");
}

TEST(WdsShardList, ListsFoldersAndRootRelativePaths) {
  TempDir dir;
  fs::create_directories(dir / "train");
  for (const char* name : {"train/s-1.tar", "train/s-0.tar", "val-0.tar", "val-1.tar"}) write_shard(dir / name, {{"a.cls", "1"}});
  stoker::testing::write_bytes(dir / "train" / "notes.txt", "x");
  const auto listed = expand_shard_list("train::val-{0..1}.tar", dir.path().string());
  ASSERT_EQ(listed.size(), 4u);
  EXPECT_EQ(fs::path(listed[0]).filename(), "s-0.tar");
  EXPECT_EQ(fs::path(listed[1]).filename(), "s-1.tar");
  EXPECT_EQ(listed[3], (dir / "val-1.tar").string());
  EXPECT_CONTAINS(error_of([&] { expand_shard_list("val-{0..2}.tar", dir.path().string()); }),
                  "val-2.tar (from 'val-{0..2}.tar') does not exist");
  EXPECT_CONTAINS(error_of([&] { expand_shard_list("::", dir.path().string()); }), "names no shards");
}

TEST(WdsIndex, BuiltOnceCachedBesideTheShardAndRebuiltWhenTheShardChanges) {
  TempDir dir;
  const fs::path shard = dir / "train-000000.tar";
  write_shard(shard, {{"a.jpg", "JJ"}, {"a.cls", "1"}, {"b.jpg", "K"}, {"b.cls", "2"}});
  const ShardIndex built = index_shard(shard.string(), (dir / "cache").string());
  EXPECT_FALSE(built.from_cache);
  EXPECT_EQ(built.index_file, (dir / "train-000000.idx").string());
  ASSERT_EQ(built.samples.size(), 2u);
  // DALI's wds2idx v1.2 lines: "<ext> <offset> <size> <name>" per member.
  const std::string text = stoker::testing::read_bytes(dir / "train-000000.idx");
  EXPECT_EQ(text.substr(0, 7), "v1.2 2 ");
  EXPECT_CONTAINS(text, "\njpg 512 2 a.jpg cls 1536 1 a.cls\njpg 2560 1 b.jpg cls 3584 1 b.cls\n");
  const ShardIndex again = index_shard(shard.string(), (dir / "cache").string());
  EXPECT_TRUE(again.from_cache);
  ASSERT_EQ(again.samples.size(), 2u);
  EXPECT_EQ(again.samples[1].key, "b");
  EXPECT_EQ(again.samples[1].find("cls")->offset, 3584);
  // A rewritten shard (other size) is indexed again.
  write_shard(shard, {{"c.jpg", "JJJ"}, {"c.cls", "3"}});
  const ShardIndex rebuilt = index_shard(shard.string(), (dir / "cache").string());
  EXPECT_FALSE(rebuilt.from_cache);
  ASSERT_EQ(rebuilt.samples.size(), 1u);
  EXPECT_EQ(rebuilt.samples[0].key, "c");
  // A damaged index is not trusted.
  const std::string current = stoker::testing::read_bytes(dir / "train-000000.idx");
  stoker::testing::write_bytes(dir / "train-000000.idx", current.substr(0, current.size() - 9));
  EXPECT_FALSE(index_shard(shard.string(), (dir / "cache").string()).from_cache);
}

TEST(WdsIndex, GoesToTheCacheFolderWhenItCannotBeWrittenBesideTheShard) {
  TempDir dir;
  const fs::path shard = dir / "s.tar";
  write_shard(shard, {{"a.jpg", "JJ"}, {"a.cls", "1"}});
  fs::create_directories(dir / "s.idx");  // a folder where the index would go: it cannot be written there
  const ShardIndex built = index_shard(shard.string(), (dir / "cache").string());
  EXPECT_EQ(fs::path(built.index_file).parent_path(), dir / "cache");
  EXPECT_TRUE(index_shard(shard.string(), (dir / "cache").string()).from_cache);
}

TEST(WdsIndex, ParseRefusesStaleAndMalformedText) {
  const std::vector<WdsSample> samples = {{"k", {{"jpg", 512, 3}, {"cls", 1536, 1}}}};
  const std::string text = format_shard_index(samples, 3072, 42);
  std::vector<WdsSample> out;
  EXPECT_TRUE(parse_shard_index(text, 3072, 42, out));
  EXPECT_FALSE(parse_shard_index(text, 3072, 43, out));    // touched since
  EXPECT_FALSE(parse_shard_index(text, 2048, 42, out));    // other size
  EXPECT_FALSE(parse_shard_index("v1.2 1\njpg 512 3 k.jpg\n", 3072, 42, out));  // DALI's own: no stamp to check
  std::string beyond = text;
  beyond.replace(beyond.find("1536 1"), 6, "1536 9999");
  EXPECT_FALSE(parse_shard_index(beyond, 3072, 42, out));
  // Names the format cannot hold are not cached.
  EXPECT_EQ(format_shard_index({{"a b", {{"jpg", 512, 3}}}}, 3072, 42), "");
}

TEST(WebDatasetType, ReadsImagesAndLabelsByPread) {
  TempDir dir;
  write_shard(dir / "s-0.tar", {{"x/a.png", png_bytes(dir.path(), 11)}, {"x/a.cls", "3\n"}, {"x/b.png", png_bytes(dir.path(), 22)}, {"x/b.cls", " 7 "}});
  write_shard(dir / "s-1.tar", {{"c.jpeg.txt", "caption"}, {"c.png", png_bytes(dir.path(), 33)}, {"c.cls", "0"}});
  auto set = create_dataset(webdataset_options((dir / "s-{0..1}.tar").string()));
  ASSERT_EQ(set->size(), 3);
  EXPECT_EQ(set->num_classes(), 10);
  EXPECT_EQ(set->describe(1), (dir / "s-0.tar").string() + ":x/b");
  RawSample s;
  set->read(1, s);
  EXPECT_TRUE(s.encoded);
  EXPECT_EQ(s.label, 7);
  EXPECT_EQ(std::string(s.bytes.begin(), s.bytes.end()), png_bytes(dir.path(), 22));
  set->read(2, s);
  EXPECT_EQ(s.label, 0);
  EXPECT_EQ(std::string(s.bytes.begin(), s.bytes.end()), png_bytes(dir.path(), 33));
  DatasetOptions limited = webdataset_options((dir / "s-{0..1}.tar").string());
  limited.limit = 2;
  EXPECT_EQ(create_dataset(limited)->size(), 2);
  DatasetOptions test_split = webdataset_options((dir / "s-0.tar").string());  // shards only
  test_split.split = "test";
  EXPECT_CONTAINS(error_of([&] { create_dataset(test_split); }), "data.webdataset.test_shards is empty");
}

// The doctor's "opens a sample": a shard is opened by its first read only, whatever the reads after.
TEST(WebDatasetType, EachShardIsOpenedOnceAndItsImageBytesCounted) {
  TempDir dir;
  write_shard(dir / "s-0.tar", {{"a.png", png_bytes(dir.path(), 11)}, {"a.cls", "3"},
                                {"b.png", png_bytes(dir.path(), 22)}, {"b.cls", "1"}});
  write_shard(dir / "s-1.tar", {{"c.png", png_bytes(dir.path(), 33)}, {"c.cls", "0"}});
  SamplePipeline p(create_dataset(webdataset_options((dir / "s-{0..1}.tar").string())), SamplePipelineOptions());
  SampleWork work;
  int64_t bytes = 0;
  for (int round = 0; round < 3; ++round) {
    for (int64_t i = 0; i < 3; ++i) {
      p.read(i, work);
      bytes += static_cast<int64_t>(work.raw.bytes.size());
    }
  }
  const StageTimes t = p.take_times();
  EXPECT_EQ(t.read_opens, 2) << "9 reads from 2 shards";
  EXPECT_EQ(t.read_bytes, bytes);
  EXPECT_EQ(bytes, 3 * static_cast<int64_t>(png_bytes(dir.path(), 11).size() + png_bytes(dir.path(), 22).size() +
                                            png_bytes(dir.path(), 33).size()));
}

// data.webdataset.order: shard_window hands the sampler the shards' ends (data.limit cuts them) and
// the window; the loader's order is then the shard-locality order.
TEST(WebDatasetType, ShardWindowOrderTakesTheShardsFromTheData) {
  TempDir dir;
  const std::string p = png_bytes(dir.path(), 5);
  write_shard(dir / "s-0.tar", {{"a.png", p}, {"a.cls", "1"}, {"b.png", p}, {"b.cls", "2"}, {"c.png", p}, {"c.cls", "3"}});
  write_shard(dir / "s-1.tar", {{"d.png", p}, {"d.cls", "1"}, {"e.png", p}, {"e.cls", "2"}});
  write_shard(dir / "s-2.tar", {{"f.png", p}, {"f.cls", "1"}, {"g.png", p}, {"g.cls", "2"}, {"h.png", p}, {"h.cls", "3"},
                                {"i.png", p}, {"i.cls", "4"}});
  DatasetOptions o = webdataset_options((dir / "s-{0..2}.tar").string());
  EXPECT_TRUE(create_dataset(o)->shard_layout().ends.empty()) << "order: global needs no shards";
  o.own.as<WebDatasetOptions>().order = "shard_window";
  o.own.as<WebDatasetOptions>().shard_window = 2;
  auto set = create_dataset(o);
  EXPECT_EQ(set->shard_layout().ends, (std::vector<int64_t>{3, 5, 9}));
  EXPECT_EQ(set->shard_layout().window, 2);
  DatasetOptions limited = o;
  limited.limit = 4;
  EXPECT_EQ(create_dataset(limited)->shard_layout().ends, (std::vector<int64_t>{3, 4}));
  // A memory cache of every sample keeps the order; one of a subset has no shards to keep.
  EXPECT_EQ(CachedDataset(set, CacheOptions()).shard_layout().ends, (std::vector<int64_t>{3, 5, 9}));
  EXPECT_TRUE(CachedDataset(set, CacheOptions().set_max_samples(4)).shard_layout().ends.empty());
  LoaderOptions l;
  l.batch_size = 3;
  l.seed = 4;
  l.transforms = {make_transform("random_crop")};
  l.transforms[0].as<RandomCropOptions>().size = 2;
  l.mean = {0.5, 0.5, 0.5};
  l.std = {0.5, 0.5, 0.5};
  Loader loader(set, l);
  const Sampler expected(9, SamplerOptions().set_batch_size(3).set_seed(4).set_shard_window({3, 5, 9}, 2));
  EXPECT_EQ(loader.sampler().epoch_samples(1)->samples, expected.epoch_samples(1)->samples);
  EXPECT_NE(loader.sampler().epoch_samples(1)->samples, Sampler(9, l.sampler()).epoch_samples(1)->samples);
  o.own.as<WebDatasetOptions>().shard_window = 0;
  EXPECT_CONTAINS(error_of([&] { o.own.options().check(); }), "shard_window");
}

TEST(WebDatasetType, ShardsComeFromInfoJsonWhenNotSet) {
  TempDir dir;
  write_shard(dir / "train-000000.tar", {{"a.png", "P"}, {"a.cls", "1"}, {"b.png", "P"}, {"b.cls", "2"}});
  write_shard(dir / "train-000001.tar", {{"c.png", "P"}, {"c.cls", "1"}});
  write_shard(dir / "val-000000.tar", {{"d.png", "P"}, {"d.cls", "1"}});
  const std::string info = R"({"splits": {"train": {"filenames": ["train-000000.tar", "train-000001.tar"],
    "shard_lengths": [2, LAST]}, "validation": {"filenames": ["val-000000.tar"]}}})";
  auto write_info = [&](int last) {
    std::string text = info;
    text.replace(text.find("LAST"), 4, std::to_string(last));
    stoker::testing::write_bytes(dir / "_info.json", text);
  };
  DatasetOptions o = webdataset_options("");
  o.root = dir.path().string();
  EXPECT_CONTAINS(error_of([&] { create_dataset(o); }), "data.webdataset.shards is empty and data.root (" +
                  dir.path().string() + ") has no _info.json");
  write_info(1);
  EXPECT_EQ(create_dataset(o)->size(), 3);
  o.split = "test";
  EXPECT_EQ(create_dataset(o)->size(), 1);
  o.split = "train";
  write_info(5);
  EXPECT_CONTAINS(error_of([&] { create_dataset(o); }), "/_info.json says " + (dir / "train-000001.tar").string() +
                  " holds 5 samples, but it holds 1");
}

TEST(WebDatasetType, MissingOrBadMembersAreBadSamplesNamingTheSample) {
  TempDir dir;
  const fs::path shard = dir / "s.tar";
  write_shard(shard, {{"a.png", "P"}, {"b.cls", "1"}, {"c.png", "P"}, {"c.cls", "one"}, {"d.png", "P"},
                      {"d.cls", "12"}, {"e.webp", "W"}, {"e.cls", "1"}});
  auto set = create_dataset(webdataset_options(shard.string()));
  ASSERT_EQ(set->size(), 5);
  RawSample s;
  const std::string name = shard.string();
  EXPECT_CONTAINS(error_of([&] { set->read(0, s); }), "sample " + name + ":a has no 'cls' member for its label (it has: png)");
  EXPECT_CONTAINS(error_of([&] { set->read(1, s); }), "sample " + name + ":b has no image member (jpg jpeg png; it has: cls)");
  EXPECT_CONTAINS(error_of([&] { set->read(2, s); }), "sample " + name + ":c: its cls member 'one' is not an integer");
  EXPECT_CONTAINS(error_of([&] { set->read(3, s); }), "sample " + name + ":d: label 12 is out of range for 10 classes");
  EXPECT_CONTAINS(error_of([&] { set->read(4, s); }), ":e has no image member");
}

TEST(WebDatasetType, LabelsFromAJsonField) {
  TempDir dir;
  write_shard(dir / "s.tar", {{"a.jpg", "J"}, {"a.json", R"({"label": 4, "caption": "x"})"}, {"b.jpg", "J"},
                              {"b.json", R"({"class": 4})"}, {"c.jpg", "J"}, {"c.json", "[1"}});
  DatasetOptions o = webdataset_options((dir / "s.tar").string());
  o.own.as<WebDatasetOptions>().label = "json";
  auto set = create_dataset(o);
  RawSample s;
  set->read(0, s);
  EXPECT_EQ(s.label, 4);
  EXPECT_CONTAINS(error_of([&] { set->read(1, s); }), ":b: its json member has no integer field 'label'");
  EXPECT_CONTAINS(error_of([&] { set->read(2, s); }), ":c: its json member is not a JSON object");
}

TEST(WebDatasetType, DamagedShardIsAnErrorNamingTheShard) {
  TempDir dir;
  write_shard(dir / "s.tar", {{"a.jpg", std::string(600, 'J')}, {"a.cls", "1"}});
  const std::string bytes = stoker::testing::read_bytes(dir / "s.tar");
  stoker::testing::write_bytes(dir / "cut.tar", bytes.substr(0, 1000));
  EXPECT_CONTAINS(error_of([&] { create_dataset(webdataset_options((dir / "cut.tar").string())); }),
                  (dir / "cut.tar").string() + ": member 'a.jpg' (header at byte 0) claims 600 bytes");
  std::string flipped = bytes;
  flipped[1536 + 20] ^= 1;
  stoker::testing::write_bytes(dir / "flip.tar", flipped);
  EXPECT_CONTAINS(error_of([&] { create_dataset(webdataset_options((dir / "flip.tar").string())); }),
                  (dir / "flip.tar").string() + ": bad header checksum at byte 1536");
  stoker::testing::write_bytes(dir / "junk.tar", std::string(4096, 'z'));
  EXPECT_CONTAINS(error_of([&] { create_dataset(webdataset_options((dir / "junk.tar").string())); }),
                  "junk.tar: bad header checksum at byte 0");
  write_shard(dir / "empty.tar", {{"README", "x"}});
  EXPECT_CONTAINS(error_of([&] { create_dataset(webdataset_options((dir / "empty.tar").string())); }),
                  "empty.tar holds no samples");
}

// ---- shards from other writers ------------------------------------------------------------------

// The members and payloads a scan finds, by name.
std::map<std::string, std::string> contents(const fs::path& shard) {
  const std::string bytes = stoker::testing::read_bytes(shard);
  std::map<std::string, std::string> out;
  for (const TarMember& m : scan_tar_file(shard.string())) out[m.name] = bytes.substr(m.offset, m.size);
  return out;
}

// The files the other writers archive: a long path (over 100 bytes, and over 155 + 100 without a
// usable '/'), a hidden file and a folder entry.
const std::string kLongKey = "deep/" + std::string(110, 'k') + "/" + std::string(120, 'q');

void write_tree(const fs::path& root) {
  fs::create_directories(root / "deep" / std::string(110, 'k'));
  stoker::testing::write_bytes(root / (kLongKey + ".jpg"), std::string(1000, 'J'));
  stoker::testing::write_bytes(root / (kLongKey + ".cls"), "5");
  stoker::testing::write_bytes(root / "short.jpg", "SJ");
  stoker::testing::write_bytes(root / "short.cls", "2");
  stoker::testing::write_bytes(root / ".hidden", "h");
}

void expect_tree(const fs::path& shard, const std::string& prefix) {
  SCOPED_TRACE(shard.string());
  const auto found = contents(shard);
  ASSERT_EQ(found.count(prefix + kLongKey + ".jpg"), 1u);
  EXPECT_EQ(found.at(prefix + kLongKey + ".jpg"), std::string(1000, 'J'));
  EXPECT_EQ(found.at(prefix + kLongKey + ".cls"), "5");
  EXPECT_EQ(found.at(prefix + "short.jpg"), "SJ");
  const auto samples = group_samples(scan_tar_file(shard.string()), shard.string());
  ASSERT_EQ(samples.size(), 2u);
  for (const auto& s : samples) {
    EXPECT_NE(s.find("jpg"), nullptr) << s.key;
    EXPECT_NE(s.find("cls"), nullptr) << s.key;
  }
}

TEST(WdsOtherWriters, GnuTarInGnuAndPosixFormats) {
  if (stoker::testing::shell("tar --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "GNU tar is not installed";
  TempDir dir;
  write_tree(dir / "tree");
  for (const char* format : {"gnu", "posix", "ustar"}) {
    const fs::path shard = dir / (std::string(format) + ".tar");
    // ustar cannot hold the long name: only the short sample.
    const std::string files = std::string(format) == "ustar" ? "short.jpg short.cls" : "short.jpg short.cls deep .hidden";
    const std::string command = "cd '" + (dir / "tree").string() + "' && tar --format=" + format + " -cf '" +
                                shard.string() + "' " + files + " 2>/dev/null";
    ASSERT_EQ(stoker::testing::shell(command), 0) << command;
    if (std::string(format) == "ustar") {
      EXPECT_EQ(contents(shard).at("short.cls"), "2");
      continue;
    }
    expect_tree(shard, "");
  }
}

TEST(WdsOtherWritersPython, TarfileInPaxAndGnuFormats) {
  std::string why;
  const fs::path python = stoker::testing::venv_python(&why);
  if (python.empty()) GTEST_SKIP() << why;
  TempDir dir;
  write_tree(dir / "tree");
  // As WebDataset's TarWriter: a float mtime makes tarfile write a pax header before every member.
  const std::string script =
      "import sys, tarfile, time, os\n"
      "os.chdir(sys.argv[1])\n"
      "for name, fmt in (('pax', tarfile.PAX_FORMAT), ('gnu', tarfile.GNU_FORMAT), ('default', tarfile.DEFAULT_FORMAT)):\n"
      "    with tarfile.open(os.path.join(sys.argv[2], name + '.tar'), 'w', format=fmt) as tar:\n"
      "        for path in ('short.jpg', 'short.cls', 'deep', '.hidden'):\n"
      "            tar.add(path, filter=lambda info: (setattr(info, 'mtime', time.time()), info)[1])\n";
  stoker::testing::write_bytes(dir / "make.py", script);
  const std::string command = "'" + python.string() + "' '" + (dir / "make.py").string() + "' '" +
                              (dir / "tree").string() + "' '" + dir.path().string() + "'";
  ASSERT_EQ(stoker::testing::shell(command), 0) << command;
  for (const char* name : {"pax", "gnu", "default"}) expect_tree(dir / (std::string(name) + ".tar"), "");
  // PAX is tarfile's default since Python 3.8, so "default" wrote pax headers too.
  EXPECT_CONTAINS(stoker::testing::read_bytes(dir / "default.tar"), "PaxHeader");
}

}  // namespace
}  // namespace stoker::data
