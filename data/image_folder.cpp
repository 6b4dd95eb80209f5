#include "data/image_folder.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"
#include "common/error_kinds.h"
#include "common/log.h"
#include "data/random.h"

namespace stoker::data {
namespace fs = std::filesystem;

namespace {

std::string lower_extension(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext;
}

bool is_image_file(const fs::path& p) {
  const std::string ext = lower_extension(p);
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

bool hidden(const fs::path& p) { return p.filename().string().rfind('.', 0) == 0; }

// What a split's folder holds: its class folders (sorted) with their image files (sorted), and what
// is there that is not read.
struct Listing {
  std::vector<std::string> classes;
  std::map<std::string, std::vector<std::string>> files;
  std::map<std::string, int64_t> other_extensions;  // ".txt" -> files of it, in class folders
  int64_t sub_folders = 0;                          // folders inside class folders
  int64_t loose_files = 0;                          // files beside the class folders
};

Listing list_classes(const fs::path& dir) {
  Listing l;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (hidden(entry.path())) continue;
    if (entry.is_directory()) {
      l.classes.push_back(entry.path().filename().string());
    } else {
      ++l.loose_files;
    }
  }
  std::sort(l.classes.begin(), l.classes.end());
  for (const std::string& c : l.classes) {
    std::vector<std::string>& found = l.files[c];
    for (const auto& entry : fs::directory_iterator(dir / c)) {
      if (hidden(entry.path())) continue;
      if (entry.is_directory()) {
        ++l.sub_folders;
      } else if (is_image_file(entry.path())) {
        found.push_back(entry.path().string());
      } else {
        ++l.other_extensions[entry.path().has_extension() ? lower_extension(entry.path()) : "(no extension)"];
      }
    }
    std::sort(found.begin(), found.end());
  }
  return l;
}

// One line for the files a split's folder holds that are not read, or "" when there are none.
std::string skipped_line(const Listing& l, const fs::path& dir) {
  std::vector<std::string> parts;
  int64_t others = 0;
  std::vector<std::string> kinds;
  for (const auto& [ext, n] : l.other_extensions) {
    others += n;
    kinds.push_back(fmt::format("{} {}", n, ext));
  }
  if (others > 0) parts.push_back(fmt::format("{} file(s) of other types ({})", others, fmt::join(kinds, ", ")));
  if (l.sub_folders > 0) parts.push_back(fmt::format("{} sub-folder(s) inside class folders", l.sub_folders));
  if (l.loose_files > 0) parts.push_back(fmt::format("{} file(s) beside the class folders", l.loose_files));
  if (parts.empty()) return "";
  return fmt::format("{}: left out {}: only .jpg, .jpeg and .png files directly in <class>/ folders are read",
                     dir.string(), fmt::join(parts, ", "));
}

// The names, or the first twelve and a count.
std::string short_list(const std::vector<std::string>& names) {
  if (names.size() <= 12) return fmt::format("{}", fmt::join(names, ", "));
  return fmt::format("{}, ... ({} in all)", fmt::join(names.begin(), names.begin() + 12, ", "), names.size());
}

// The class names in `found` must be the `reference` ones (the training split's or a checkpoint's):
// the same set, labelled in the reference's order.
void check_same_classes(const std::vector<std::string>& found, const std::vector<std::string>& reference,
                        const std::string& source, const fs::path& dir) {
  const std::set<std::string> have(found.begin(), found.end()), want(reference.begin(), reference.end());
  std::vector<std::string> extra, missing;
  for (const std::string& c : found) {
    if (want.count(c) == 0) extra.push_back(c);
  }
  for (const std::string& c : reference) {
    if (have.count(c) == 0) missing.push_back(c);
  }
  if (extra.empty() && missing.empty()) return;
  std::vector<std::string> why;
  if (!extra.empty()) why.push_back(fmt::format("it has {}, which {} lacks", fmt::join(extra, ", "), source));
  if (!missing.empty()) why.push_back(fmt::format("it lacks {}", fmt::join(missing, ", ")));
  STOKER_FAIL("the class folders of {} are not those of {}: {}; labels matched by position would be wrong. Give "
              "both the same class folders ({}: {}; {}: {})",
              dir.string(), source, fmt::join(why, "; "), source, short_list(reference), dir.string(),
              short_list(found));
}

}  // namespace

std::string image_folder_split_dir(const std::string& root_name, const std::string& split, double val_split) {
  const fs::path root = root_name;
  STOKER_CHECK_FOUND(fs::is_directory(root), "data.root {} is not a folder; set data.root to the folder that holds your "
               "images (relative paths are from the working directory)", root.string());
  const bool layered = fs::is_directory(root / "train");
  if (val_split > 0) {
    STOKER_CHECK(!layered, "data.val_split ({}) holds out a share of each class of a flat folder (<root>/<class>/), "
                 "but {} has a train/ folder; remove data.val_split to use its train/ and val/ folders",
                 val_split, root.string());
    return root.string();
  }
  if (split == "train") {
    STOKER_CHECK(layered, "{} has no train/ folder; give data.root a folder that holds train/<class>/ and val/<class>/ "
                 "(or test/, validation/), or, for a folder of class folders (<root>/<class>/), set data.val_split "
                 "(e.g. 0.2) to hold out a share of each class for testing",
                 root.string());
    return (root / "train").string();
  }
  for (const char* name : {"val", "validation", "test"}) {
    if (fs::is_directory(root / name)) return (root / name).string();
  }
  STOKER_FAIL("{} has train/ but no val/, validation/ or test/ folder for the test split; add one with the same "
              "class folders, or move the class folders up into {} and set data.val_split (e.g. 0.2)",
              root.string(), root.string());
}

std::vector<std::string> split_class_files(const std::vector<std::string>& files, const std::string& class_name,
                                           const std::string& split, double val_split, uint64_t seed) {
  const int64_t n = static_cast<int64_t>(files.size());
  const int64_t held = n < 2 ? 0 : std::clamp<int64_t>(std::llround(val_split * static_cast<double>(n)), 1, n - 1);
  uint64_t name_key = 0;
  for (unsigned char c : class_name) name_key = name_key * 131 + c;
  // A seeded order of the class's files: the first `held` of it are the held-out ones.
  std::vector<std::pair<uint64_t, int64_t>> order;
  for (int64_t i = 0; i < n; ++i) order.emplace_back(mix_seed(seed, name_key, static_cast<uint64_t>(i)), i);
  std::sort(order.begin(), order.end());
  std::vector<bool> test(static_cast<size_t>(n), false);
  for (int64_t k = 0; k < held; ++k) test[static_cast<size_t>(order[static_cast<size_t>(k)].second)] = true;
  std::vector<std::string> out;
  for (int64_t i = 0; i < n; ++i) {
    if (test[static_cast<size_t>(i)] == (split != "train")) out.push_back(files[static_cast<size_t>(i)]);
  }
  return out;
}

ImageFolderDataset::ImageFolderDataset(const DatasetOptions& options) {
  const fs::path dir = image_folder_split_dir(options.root, options.split, options.val_split);
  const Listing listing = list_classes(dir);
  STOKER_CHECK(!listing.classes.empty(), "{} has no class folders; put each class's images in {}/<class>/",
               dir.string(), dir.string());
  if (const std::string skipped = skipped_line(listing, dir); !skipped.empty()) logger().info("{}", skipped);
  classes_ = listing.classes;
  if (!options.class_names.empty()) {
    check_same_classes(classes_, options.class_names, options.class_names_source, dir);
    classes_ = options.class_names;
  }
  for (size_t c = 0; c < classes_.size(); ++c) {
    std::vector<std::string> found = listing.files.at(classes_[c]);
    STOKER_CHECK(!found.empty(), "class folder {} holds no .jpg, .jpeg or .png files; remove it or add images",
                 (dir / classes_[c]).string());
    if (options.val_split > 0) found = split_class_files(found, classes_[c], options.split, options.val_split, options.seed);
    for (auto& f : found) {
      files_.push_back(std::move(f));
      labels_.push_back(static_cast<int64_t>(c));
    }
  }
  STOKER_CHECK(options.num_classes <= 0 || options.num_classes == num_classes(),
               "{} has {} class folders ({}) but data.num_classes is {}; make them agree, or leave data.num_classes "
               "out to take it from the folders",
               dir.string(), num_classes(), short_list(classes_), options.num_classes);
  if (options.limit > 0 && options.limit < size()) {
    // Keep a spread over classes: every k-th file.
    std::vector<std::string> files;
    std::vector<int64_t> labels;
    const double step = static_cast<double>(size()) / static_cast<double>(options.limit);
    for (int64_t i = 0; i < options.limit; ++i) {
      const auto at = static_cast<size_t>(static_cast<double>(i) * step);
      files.push_back(files_[at]);
      labels.push_back(labels_[at]);
    }
    files_ = std::move(files);
    labels_ = std::move(labels);
  }
}

void ImageFolderDataset::read(int64_t index, RawSample& out) const {
  const std::string& path = files_[index];
  out.encoded = true;
  out.label = labels_[index];
  std::FILE* f = std::fopen(path.c_str(), "rb");
  STOKER_CHECK(f != nullptr, "{}: cannot open ({})", path, std::strerror(errno));
  out.opens = 1;
  std::fseek(f, 0, SEEK_END);
  const long size = std::ftell(f);
  std::fseek(f, 0, SEEK_SET);
  out.bytes.resize(size > 0 ? static_cast<size_t>(size) : 0);
  const size_t got = size > 0 ? std::fread(out.bytes.data(), 1, out.bytes.size(), f) : 0;
  std::fclose(f);
  STOKER_CHECK(got == out.bytes.size(), "{}: read {} of {} bytes", path, got, out.bytes.size());
}

}  // namespace stoker::data
