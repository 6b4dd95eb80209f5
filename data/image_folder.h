// ImageFolder (`data.type: image_folder`): JPEG and PNG files in one folder per class, in either
// layout a user brings:
//   <root>/train/<class>/<file> and <root>/val/<class>/<file>   (`validation/` and `test/` accepted
//                                                                 for the held-out split)
//   <root>/<class>/<file> with data.val_split: 0.2              (a share of each class held out for
//                                                                 testing: seeded, stratified)
// Classes are the folders' names in sorted order; hidden folders (.ipynb_checkpoints) are not
// classes. The held-out split takes its labels from the training split's class names (the
// `class_names` a split is given), so a folder renamed in one split is an error listing both sets,
// never a silent relabelling. Files it does not read (other extensions, sub-folders of a class) are
// said in one line, not skipped silently.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace stoker::data {

class ImageFolderDataset : public Dataset {
 public:
  explicit ImageFolderDataset(const DatasetOptions& options);
  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  int64_t num_classes() const override { return static_cast<int64_t>(classes_.size()); }
  int64_t channels() const override { return 3; }
  void read(int64_t index, RawSample& out) const override;
  std::string describe(int64_t index) const override { return files_[index]; }
  const std::vector<std::string>& classes() const { return classes_; }
  std::vector<std::string> class_names() const override { return classes_; }

 private:
  std::vector<std::string> classes_;
  std::vector<std::string> files_;
  std::vector<int64_t> labels_;
};

// The folder of one split's class folders: <root>/train, or the first of <root>/val,
// <root>/validation, <root>/test for the held-out split ("test" or "val"); <root> itself in the flat
// layout (data.val_split). An error says what is there and what to do when neither layout fits.
std::string image_folder_split_dir(const std::string& root, const std::string& split, double val_split);

// The files of one class that a split keeps in the flat layout: every file but the held-out share
// (`val_split`, at least one when the class has two or more) for "train", that share for the other;
// which ones is a function of `seed` and the class's name alone, the same in both splits.
std::vector<std::string> split_class_files(const std::vector<std::string>& files, const std::string& class_name,
                                           const std::string& split, double val_split, uint64_t seed);

}  // namespace stoker::data
