// Image folders (data/image_folder.h) as a user brings them: the held-out split labelled by the
// training split's class names (a renamed folder is an error listing both sets, never a silent
// relabelling), hidden folders that are not classes, validation/ beside val/ and test/, the flat
// layout with a seeded, stratified data.val_split, and one line for the files it leaves out.
#include "data/image_folder.h"

#include <gtest/gtest.h>

#include <set>

#include "common/log.h"
#include "test_util.h"

namespace stoker::data {
namespace {
namespace fs = std::filesystem;
using stoker::testing::TempDir;

void write_images(const fs::path& dir, int count) {
  fs::create_directories(dir);
  for (int i = 0; i < count; ++i) {
    stoker::testing::write_png(dir / (std::to_string(i) + ".png"), 4, 4, 3, std::vector<uint8_t>(48, static_cast<uint8_t>(i)));
  }
}

DatasetOptions folder(const fs::path& root, const std::string& split, std::vector<std::string> names = {}) {
  DatasetOptions o;
  o.type = "image_folder";
  o.root = root.string();
  o.split = split;
  o.num_classes = 0;
  o.class_names = std::move(names);
  return o;
}

TEST(ImageFolder, TheTestSplitIsLabelledByTheTrainingClassNames) {
  TempDir dir;
  for (const char* c : {"circle", "square", "triangle"}) {
    write_images(dir / "train" / c, 3);
    write_images(dir / "val" / c, 2);
  }
  const ImageFolderDataset train(folder(dir.path(), "train"));
  ASSERT_EQ(train.class_names(), (std::vector<std::string>{"circle", "square", "triangle"}));
  const ImageFolderDataset val(folder(dir.path(), "test", train.class_names()));
  RawSample s;
  val.read(2, s);  // square/0.png
  EXPECT_EQ(s.label, 1);
  // val/square renamed val/a_square: sorted, it would come first and take circle's label.
  fs::rename(dir / "val/square", dir / "val/a_square");
  const std::string message =
      stoker::testing::error_of([&] { ImageFolderDataset(folder(dir.path(), "test", train.class_names())); });
  EXPECT_CONTAINS(message, "the class folders of " + (dir / "val").string() + " are not those of the training split");
  EXPECT_CONTAINS(message, "it has a_square, which the training split lacks; it lacks square");
  EXPECT_CONTAINS(message, "the training split: circle, square, triangle; " + (dir / "val").string() +
                               ": a_square, circle, triangle");
}

TEST(ImageFolder, HiddenFoldersAreNotClassesAndValidationIsAccepted) {
  TempDir dir;
  write_images(dir / "train/cat", 2);
  write_images(dir / "train/dog", 2);
  write_images(dir / "train/.ipynb_checkpoints", 1);
  write_images(dir / "validation/cat", 1);
  write_images(dir / "validation/dog", 1);
  const ImageFolderDataset train(folder(dir.path(), "train"));
  EXPECT_EQ(train.class_names(), (std::vector<std::string>{"cat", "dog"}));
  EXPECT_EQ(ImageFolderDataset(folder(dir.path(), "test", train.class_names())).size(), 2);
}

TEST(ImageFolder, AFlatFolderIsSplitBySeededStratifiedValSplit) {
  TempDir dir;
  write_images(dir / "a", 10);
  write_images(dir / "b", 5);
  EXPECT_CONTAINS(stoker::testing::error_of([&] { ImageFolderDataset(folder(dir.path(), "train")); }),
                  "has no train/ folder; give data.root a folder that holds train/<class>/ and val/<class>/");
  EXPECT_CONTAINS(stoker::testing::error_of([&] { ImageFolderDataset(folder(dir.path(), "train")); }),
                  "set data.val_split (e.g. 0.2)");
  DatasetOptions train_options = folder(dir.path(), "train");
  train_options.val_split = 0.2;
  train_options.seed = 7;
  DatasetOptions test_options = train_options;
  test_options.split = "test";
  const ImageFolderDataset train(train_options), test(test_options);
  EXPECT_EQ(train.size() + test.size(), 15);
  EXPECT_EQ(test.size(), 3);  // 2 of a's 10, 1 of b's 5: per class
  std::set<std::string> seen;
  for (int64_t i = 0; i < train.size(); ++i) seen.insert(train.describe(i));
  for (int64_t i = 0; i < test.size(); ++i) EXPECT_TRUE(seen.insert(test.describe(i)).second) << "in both splits";
  // The same seed, the same split; another seed, another one.
  EXPECT_EQ(ImageFolderDataset(test_options).describe(0), test.describe(0));
  test_options.seed = 8;
  train_options.seed = 8;
  std::set<std::string> other;
  const ImageFolderDataset reseeded(test_options);
  for (int64_t i = 0; i < reseeded.size(); ++i) other.insert(reseeded.describe(i));
  std::set<std::string> first;
  for (int64_t i = 0; i < test.size(); ++i) first.insert(test.describe(i));
  EXPECT_NE(other, first);
  // A folder with train/ refuses val_split: its own val/ would be ignored.
  write_images(dir / "train/a", 1);
  DatasetOptions layered = folder(dir.path(), "train");
  layered.val_split = 0.2;
  EXPECT_CONTAINS(stoker::testing::error_of([&] { const ImageFolderDataset set(layered); }),
                  "data.val_split (0.2) holds out a share of each class of a flat folder");
}

TEST(ImageFolder, FilesItLeavesOutAreSaidInOneLine) {
  TempDir dir;
  write_images(dir / "train/cat", 2);
  stoker::testing::write_bytes(dir / "train/cat/notes.txt", "x");
  stoker::testing::write_bytes(dir / "train/cat/photo.webp", "x");
  fs::create_directories(dir / "train/cat/more");
  stoker::testing::write_bytes(dir / "train/README", "x");
  attach_log_file(dir / "log.txt");
  const ImageFolderDataset train(folder(dir.path(), "train"));
  EXPECT_EQ(train.size(), 2);
  logger().flush();
  EXPECT_CONTAINS(stoker::testing::read_bytes(dir / "log.txt"),
                  (dir / "train").string() + ": left out 2 file(s) of other types (1 .txt, 1 .webp), 1 sub-folder(s) "
                  "inside class folders, 1 file(s) beside the class folders: only .jpg, .jpeg and .png files");
}

TEST(ImageFolder, TheClassCountIsCheckedWithTheFoldersNamed) {
  TempDir dir;
  write_images(dir / "train/cat", 1);
  write_images(dir / "train/dog", 1);
  DatasetOptions o = folder(dir.path(), "train");
  o.num_classes = 10;
  EXPECT_CONTAINS(stoker::testing::error_of([&] { const ImageFolderDataset set(o); }),
                  "has 2 class folders (cat, dog) but data.num_classes is 10; make them agree, or leave "
                  "data.num_classes out to take it from the folders");
}

}  // namespace
}  // namespace stoker::data
