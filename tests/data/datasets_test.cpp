#include "data/dataset.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>

#include "common/error.h"
#include "data/image_folder.h"
#include "data/loader.h"
#include "data/transform_options.h"
#include "test_util.h"

namespace stoker::data {
namespace {
using stoker::testing::error_of;
namespace fs = std::filesystem;
using stoker::testing::TempDir;

DatasetOptions options(const std::string& type, const fs::path& root, const std::string& split = "train") {
  DatasetOptions o;
  o.type = type;
  o.root = root.string();
  o.split = split;
  o.num_classes = type == "image_folder" ? 0 : 10;  // 0: as many as there are class folders
  return o;
}

TEST(Cifar, ReadsRecordsAsHwcImages) {
  TempDir dir;
  // Two CIFAR-10 records: label, then R, G, B planes of 32x32.
  std::string bytes;
  for (int r = 0; r < 2; ++r) {
    bytes.push_back(static_cast<char>(3 + r));
    for (int c = 0; c < 3; ++c) bytes.append(1024, static_cast<char>(10 * c + r));
  }
  stoker::testing::write_bytes(dir / "test_batch.bin", bytes);
  auto set = create_dataset(options("cifar10", dir.path(), "test"));
  ASSERT_EQ(set->size(), 2);
  EXPECT_EQ(set->channels(), 3);
  ASSERT_EQ(set->class_names().size(), 10u);
  EXPECT_EQ(set->class_names()[3], "cat");
  RawSample s;
  set->read(1, s);
  EXPECT_FALSE(s.encoded);
  EXPECT_EQ(s.label, 4);
  EXPECT_EQ(s.image.height, 32);
  EXPECT_EQ((std::vector<uint8_t>(s.image.pixels.begin(), s.image.pixels.begin() + 3)), (std::vector<uint8_t>{1, 11, 21}));

  stoker::testing::write_bytes(dir / "test_batch.bin", bytes.substr(0, 4000));
  EXPECT_CONTAINS(error_of([&] { create_dataset(options("cifar10", dir.path(), "test")); }),
                  "is not a whole number of 3073-byte CIFAR-10 records");
  EXPECT_CONTAINS(error_of([&] { create_dataset(options("cifar10", dir.path(), "train")); }),
                  "data_batch_1.bin not found");
}

TEST(ImageFolder, FindsClassesInOrderAndReadsFiles) {
  TempDir dir;
  for (const char* cls : {"zebra", "ant"}) {
    fs::create_directories(dir / "train" / cls);
    for (int i = 0; i < 3; ++i) {
      stoker::testing::write_png(dir / "train" / cls / (std::to_string(i) + ".png"), 5, 7, 3,
                                 std::vector<uint8_t>(5 * 7 * 3, static_cast<uint8_t>(i)));
    }
  }
  stoker::testing::write_bytes(dir / "train/ant/notes.txt", "not an image");
  auto set = std::make_shared<ImageFolderDataset>(options("image_folder", dir.path()));
  EXPECT_EQ(set->classes(), (std::vector<std::string>{"ant", "zebra"}));
  EXPECT_EQ(set->class_names(), set->classes());
  ASSERT_EQ(set->size(), 6);
  RawSample s;
  set->read(4, s);
  EXPECT_TRUE(s.encoded);
  EXPECT_EQ(s.label, 1);
  EXPECT_EQ(sniff_format(s.bytes.data(), s.bytes.size()), ImageFormat::Png);
  EXPECT_CONTAINS(set->describe(4), "zebra/1.png");
}

TEST(Idx, ClassNamesOnlyWhenNamed) {
  TempDir dir;
  stoker::testing::write_synthetic_idx_dataset(dir.path(), 16, 8, 12);
  DatasetOptions o = options("idx", dir.path(), "test");
  EXPECT_TRUE(create_dataset(o)->class_names().empty()) << "IDX files carry no names";
  o.own = dataset_type_options("idx");
  o.own.as<IdxOptions>().class_names = "fashion_mnist";
  const std::vector<std::string> names = create_dataset(o)->class_names();
  ASSERT_EQ(names.size(), 10u);
  EXPECT_EQ(names.front(), "T-shirt/top");
  EXPECT_EQ(names.back(), "Ankle boot");
  o.num_classes = 12;
  EXPECT_CONTAINS(error_of([&] { create_dataset(o); }), "data.idx.class_names: fashion_mnist names 10 classes");
}

// data.idx.classes keeps some classes and relabels them in the order given; train_per_class keeps the
// first N training samples of each (the test split stays whole): the transfer experiment's data.
TEST(Idx, ClassesKeepAndRelabelAndTrainPerClassTakesTheFirstOfEach) {
  TempDir dir;
  stoker::testing::write_synthetic_idx_dataset(dir.path(), 200, 100, 12);
  for (const std::string split : {"train", "test"}) {
    SCOPED_TRACE(split);
    DatasetOptions all = options("idx", dir.path(), split);
    const auto everything = create_dataset(all);
    DatasetOptions o = all;
    o.num_classes = 5;
    o.own = dataset_type_options("idx");
    o.own.as<IdxOptions>().classes = {9, 5, 6, 7, 8};
    o.own.as<IdxOptions>().train_per_class = 3;
    const auto kept = create_dataset(o);
    std::vector<int64_t> per_class(5, 0);
    int64_t k = 0;
    RawSample a, b;
    for (int64_t i = 0; i < everything->size(); ++i) {
      everything->read(i, a);
      if (a.label < 5) continue;
      const int64_t relabel = a.label == 9 ? 0 : a.label - 4;
      if (split == "train" && per_class[relabel] >= 3) continue;
      ASSERT_LT(k, kept->size());
      kept->read(k++, b);
      EXPECT_EQ(b.label, relabel);
      EXPECT_EQ(b.image.pixels, a.image.pixels);
      ++per_class[relabel];
    }
    EXPECT_EQ(k, kept->size());
    if (split == "train") EXPECT_EQ(kept->size(), 15);
  }
  DatasetOptions o = options("idx", dir.path(), "train");
  o.own = dataset_type_options("idx");
  o.own.as<IdxOptions>().classes = {0, 1, 2};
  EXPECT_CONTAINS(error_of([&] { create_dataset(o); }),
                  "data.idx.classes keeps 3 classes but data.num_classes is 10; set data.num_classes: 3");
  o.own.as<IdxOptions>().classes = {0, 1, 1};
  EXPECT_CONTAINS(error_of([&] { o.own.options().check(); }), "classes lists label 1 twice");
}

TEST(ImageFolder, MissingRootAndEmptyClassesAreClearErrors) {
  TempDir dir;
  EXPECT_CONTAINS(error_of([&] { ImageFolderDataset(options("image_folder", dir.path())); }),
                  "has no train/ folder; give data.root a folder that holds train/<class>/ and val/<class>/");
  fs::create_directories(dir / "train/cat");
  EXPECT_CONTAINS(error_of([&] { ImageFolderDataset(options("image_folder", dir.path())); }),
                  "class folder " + (dir / "train/cat").string() + " holds no .jpg, .jpeg or .png files");
}

// Batches of 4 RGB samples center-cropped to 8 x 8, warnings collected in `warnings`.
LoaderOptions folder_loader_options(std::vector<std::string>& warnings) {
  LoaderOptions o;
  o.batch_size = 4;
  o.mean = {0, 0, 0};
  o.std = {1, 1, 1};
  o.transforms = {make_transform("center_crop")};
  o.transforms[0].as<CenterCropOptions>().size = 8;
  o.warn = [&warnings](const std::string& m) { warnings.push_back(m); };
  return o;
}

// A file whose header claims more than max_image_pixels is a bad sample: skipped with a warning
// naming it, never decoded (issue #12).
TEST(ImageFolder, DecompressionBombsAreSkippedAsBadSamples) {
  TempDir dir;
  fs::create_directories(dir / "train/a");
  for (int i = 0; i < 7; ++i) {
    stoker::testing::write_png(dir / "train/a" / (std::to_string(i) + ".png"), 12, 10, 3,
                               std::vector<uint8_t>(12 * 10 * 3, 100));
  }
  // 30 x 30 = 900 pixels against a limit of 200 (the others have 120): a bomb at this scale.
  stoker::testing::write_png(dir / "train/a/big.png", 30, 30, 3, std::vector<uint8_t>(30 * 30 * 3, 100));
  std::vector<std::string> warnings;
  LoaderOptions o = folder_loader_options(warnings);
  o.max_image_pixels = 200;
  Loader loader(std::make_shared<ImageFolderDataset>(options("image_folder", dir.path())), o);
  loader.start_epoch(0);
  int64_t samples = 0;
  while (auto b = loader.next()) samples += b->size();
  EXPECT_EQ(samples, 8);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_CONTAINS(warnings[0], "big.png");
  EXPECT_CONTAINS(warnings[0], "more than max_image_pixels (200)");
  EXPECT_EQ(loader.take_times().bad_samples, 1);
}

TEST(ImageFolder, CorruptFilesAreSkippedThroughTheLoader) {
  TempDir dir;
  fs::create_directories(dir / "train/a");
  for (int i = 0; i < 8; ++i) {
    stoker::testing::write_png(dir / "train/a" / (std::to_string(i) + ".png"), 12, 10, 3,
                               std::vector<uint8_t>(12 * 10 * 3, 100));
  }
  stoker::testing::write_bytes(dir / "train/a/3.png", "\x89PNG\r\n\x1a\n garbage");
  std::vector<std::string> warnings;
  LoaderOptions o = folder_loader_options(warnings);
  Loader loader(std::make_shared<ImageFolderDataset>(options("image_folder", dir.path())), o);
  loader.start_epoch(0);
  int64_t samples = 0;
  while (auto b = loader.next()) samples += b->size();
  EXPECT_EQ(samples, 8);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_CONTAINS(warnings[0], "3.png");
  EXPECT_EQ(loader.take_times().bad_samples, 1);

  o.skip_bad_samples = false;
  Loader strict(std::make_shared<ImageFolderDataset>(options("image_folder", dir.path())), o);
  strict.start_epoch(0);
  EXPECT_CONTAINS(error_of([&] {
                    while (strict.next()) {
                    }
                  }),
                  "3.png");
}

TEST(Synthetic, IsDeterministicAndSized) {
  DatasetOptions o = options("synthetic", "");
  o.own = dataset_type_options("synthetic");
  auto& own = o.own.as<SyntheticOptions>();
  own.train_samples = 10;
  own.height = 6;
  own.width = 4;
  own.channels = 3;
  auto a = create_dataset(o), b = create_dataset(o);
  RawSample sa, sb;
  a->read(7, sa);
  b->read(7, sb);
  EXPECT_EQ(sa.image.pixels, sb.image.pixels);
  EXPECT_EQ(sa.image.pixels.size(), 6u * 4u * 3u);
  EXPECT_EQ(sa.label, 7);
  o.split = "test";
  RawSample st;
  create_dataset(o)->read(7, st);
  EXPECT_NE(st.image.pixels, sa.image.pixels) << "train and test differ";
}

// The rising input cost of data.autotune: continuous's demonstration: from slow_from_epoch on each
// read sleeps slow_read_us (at least that long: a lower bound, not a ratio), and the sample is the same.
TEST(Synthetic, SlowFromEpochSleepsEachReadFromThatEpochOnWithTheSamePixels) {
  DatasetOptions o = options("synthetic", "");
  o.own = dataset_type_options("synthetic");
  auto& own = o.own.as<SyntheticOptions>();
  own.train_samples = 4;
  own.height = own.width = 4;
  own.slow_from_epoch = 2;
  own.slow_read_us = 30000;
  auto d = create_dataset(o);
  auto read_at = [&](int64_t epoch, RawSample& out) {
    out.epoch = epoch;
    const auto start = std::chrono::steady_clock::now();
    d->read(3, out);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  RawSample before, at, after;
  read_at(0, before);  // the first epoch (epochs count from 1 in the key, as in the log)
  EXPECT_GE(read_at(1, at), 0.030);
  EXPECT_GE(read_at(4, after), 0.030);
  EXPECT_EQ(at.image.pixels, before.image.pixels);
  EXPECT_EQ(after.image.pixels, before.image.pixels);
  EXPECT_EQ(at.label, before.label);

  own.slow_read_us = 0;  // one without the other is refused, naming both
  EXPECT_CONTAINS(error_of([&] { own.check(); }), "slow_from_epoch (2) and slow_read_us (0) go together");
}

TEST(DatasetRegistry, UnknownTypeListsKnownOnes) {
  EXPECT_CONTAINS(error_of([&] { create_dataset(options("lmdb", "/x")); }),
                  "unknown dataset type 'lmdb'; known: cifar10, cifar100, idx, image_folder, synthetic, webdataset");
}

}  // namespace
}  // namespace stoker::data
