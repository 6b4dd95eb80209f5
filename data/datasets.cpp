// The dataset implementations: in-memory tensors (IDX, CIFAR), ImageFolder, synthetic; and the
// dataset registry.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <thread>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include "common/error.h"
#include "common/error_kinds.h"
#include "data/dataset.h"

#include "data/image_folder.h"
#include "data/idx.h"
#include "data/random.h"
#include "data/webdataset.h"

namespace stoker::data {
namespace fs = std::filesystem;

// ---- in-memory images -------------------------------------------------------------------------------

TensorImageDataset::TensorImageDataset(std::vector<uint8_t> images, std::vector<int64_t> labels,
                                       int64_t height, int64_t width, int64_t channels,
                                       int64_t num_classes, std::string source)
    : images_(std::move(images)),
      labels_(std::move(labels)),
      height_(height),
      width_(width),
      channels_(channels),
      num_classes_(num_classes),
      source_(std::move(source)) {
  STOKER_CHECK(static_cast<int64_t>(images_.size()) == size() * height_ * width_ * channels_,
               "{}: {} bytes of pixels do not make {} images of {}x{}x{}", source_, images_.size(),
               size(), height_, width_, channels_);
  for (int64_t i = 0; i < size(); ++i) {
    STOKER_CHECK(labels_[i] >= 0 && labels_[i] < num_classes_,
                 "{}: label {} of sample {} is out of range for {} classes; fix the file or set "
                 "data.num_classes",
                 source_, labels_[i], i, num_classes_);
  }
}

void TensorImageDataset::read(int64_t index, RawSample& out) const {
  const int64_t bytes = height_ * width_ * channels_;
  out.encoded = false;
  out.image.height = height_;
  out.image.width = width_;
  out.image.channels = channels_;
  out.image.pixels.assign(images_.begin() + index * bytes, images_.begin() + (index + 1) * bytes);
  out.label = labels_[index];
}

std::string TensorImageDataset::describe(int64_t index) const {
  return fmt::format("{}[{}]", source_, index);
}

void TensorImageDataset::truncate(int64_t n) {
  if (n <= 0 || n >= size()) return;
  labels_.resize(n);
  images_.resize(n * height_ * width_ * channels_);
}

void IdxOptions::visit(OptionsVisitor& v) {
  v.field("class_names", class_names, rules::one_of({"indices", "fashion_mnist"}));
  v.field("classes", classes, rules::items(rules::number("a label 0..255", 0, 255), 0));
  v.field("train_per_class", train_per_class, rules::at_least(0));
}

void IdxOptions::check() const {
  for (size_t i = 0; i < classes.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (classes[i] == classes[j]) STOKER_FAIL("classes lists label {} twice; list each class once", classes[i]);
    }
  }
}

namespace {

// idx's `classes` and `train_per_class`: the samples kept, in order, relabelled by their class's place in
// `classes` (all classes, as they are, when it is empty).
ImageSet select_idx_samples(const ImageSet& set, const IdxOptions& o, bool train) {
  const int64_t per_class = train ? o.train_per_class : 0;
  if (o.classes.empty() && per_class == 0) return set;
  std::vector<int64_t> keep, labels, counts(256, 0);
  const auto* label = set.labels.data_ptr<int64_t>();
  for (int64_t i = 0; i < set.size(); ++i) {
    int64_t relabel = label[i];
    if (!o.classes.empty()) {
      const auto at = std::find(o.classes.begin(), o.classes.end(), label[i]);
      if (at == o.classes.end()) continue;
      relabel = at - o.classes.begin();
    }
    if (per_class > 0 && counts[static_cast<size_t>(relabel)]++ >= per_class) continue;
    keep.push_back(i);
    labels.push_back(relabel);
  }
  STOKER_CHECK(!keep.empty(), "{}: no sample has a label in data.idx.classes [{}]", set.source,
               fmt::join(o.classes, ", "));
  ImageSet out;
  out.images = set.images.index_select(0, torch::tensor(keep)).contiguous();
  out.labels = torch::tensor(labels);
  out.source = set.source;
  return out;
}

}  // namespace

const std::vector<std::string>& fashion_mnist_class_names() {
  // github.com/zalandoresearch/fashion-mnist, "Labels".
  static const std::vector<std::string> kNames = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                  "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return kNames;
}

const std::vector<std::string>& cifar10_class_names() {
  // batches.meta.txt of the binary version (www.cs.toronto.edu/~kriz/cifar.html).
  static const std::vector<std::string> kNames = {"airplane", "automobile", "bird",  "cat",  "deer",
                                                  "dog",      "frog",       "horse", "ship", "truck"};
  return kNames;
}

std::shared_ptr<Dataset> load_idx_dataset(const DatasetOptions& options) {
  const std::string prefix = options.split == "train" ? "train" : "t10k";
  const IdxOptions idx = options.own.type() == "idx" ? options.own.as<IdxOptions>() : IdxOptions();
  if (!idx.classes.empty() && options.num_classes > 0) {
    STOKER_CHECK(static_cast<int64_t>(idx.classes.size()) == options.num_classes,
                 "data.idx.classes keeps {} classes but data.num_classes is {}; set data.num_classes: {} (or leave "
                 "it out: the classes kept say)",
                 idx.classes.size(), options.num_classes, idx.classes.size());
  }
  // With `classes`, labels outside them are dropped: any byte label is fine in the file.
  ImageSet set = select_idx_samples(
      load_idx_split(options.root, prefix, idx.classes.empty() ? options.num_classes : 256), idx,
      options.split == "train");
  // data.num_classes 0: the classes kept say, else the labels (the largest plus one).
  const int64_t classes = options.num_classes > 0   ? options.num_classes
                          : !idx.classes.empty()    ? static_cast<int64_t>(idx.classes.size())
                                                    : set.labels.max().item<int64_t>() + 1;
  const torch::Tensor images = set.images.contiguous();  // [N, 1, H, W] == [N, H, W, 1]
  std::vector<uint8_t> pixels(images.data_ptr<uint8_t>(), images.data_ptr<uint8_t>() + images.numel());
  std::vector<int64_t> labels(set.labels.data_ptr<int64_t>(), set.labels.data_ptr<int64_t>() + set.size());
  auto dataset = std::make_shared<TensorImageDataset>(std::move(pixels), std::move(labels),
                                                      images.size(2), images.size(3), 1, classes, set.source);
  dataset->truncate(options.limit);
  if (idx.class_names == "fashion_mnist") {
    STOKER_CHECK(!idx.classes.empty() || classes == 10,
                 "data.idx.class_names: fashion_mnist names 10 classes but data.num_classes is {}; set it to 10 or "
                 "class_names to indices",
                 classes);
    std::vector<std::string> names;
    for (const int64_t c : idx.classes) {
      STOKER_CHECK(c < 10, "data.idx.classes lists label {}, but Fashion-MNIST (data.idx.class_names) has labels 0..9",
                   c);
      names.push_back(fashion_mnist_class_names()[static_cast<size_t>(c)]);
    }
    dataset->set_class_names(idx.classes.empty() ? fashion_mnist_class_names() : names);
  }
  return dataset;
}

// ---- CIFAR ---------------------------------------------------------------------------------------------

std::shared_ptr<Dataset> load_cifar_dataset(const DatasetOptions& options, int64_t classes) {
  const fs::path root = options.root;
  STOKER_CHECK(fs::is_directory(root),
               "CIFAR folder {} does not exist; set data.root to the folder holding the binary "
               "batches (cifar-10-batches-bin or cifar-100-binary)",
               root.string());
  std::vector<fs::path> files;
  if (classes == 10) {
    if (options.split == "train") {
      for (int i = 1; i <= 5; ++i) files.push_back(root / fmt::format("data_batch_{}.bin", i));
    } else {
      files.push_back(root / "test_batch.bin");
    }
  } else {
    files.push_back(root / (options.split == "train" ? "train.bin" : "test.bin"));
  }
  const int64_t label_bytes = classes == 10 ? 1 : 2;  // CIFAR-100: coarse, then fine label
  const int64_t record = label_bytes + 3 * 32 * 32;
  std::vector<uint8_t> pixels;
  std::vector<int64_t> labels;
  for (const auto& file : files) {
    STOKER_CHECK_FOUND(fs::is_regular_file(file), "CIFAR file {} not found; set data.root to the folder of "
                 "the binary version of CIFAR-{}", file.string(), classes);
    const auto bytes = fs::file_size(file);
    STOKER_CHECK(bytes > 0 && bytes % record == 0,
                 "{}: {} bytes is not a whole number of {}-byte CIFAR-{} records; the file is "
                 "truncated or of another data set",
                 file.string(), bytes, record, classes);
    std::ifstream in(file, std::ios::binary);
    std::vector<uint8_t> data(bytes);
    in.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(bytes));
    STOKER_CHECK(in.good(), "{}: read error", file.string());
    const int64_t n = static_cast<int64_t>(bytes) / record;
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t* r = data.data() + i * record;
      const int64_t label = r[label_bytes - 1];
      STOKER_CHECK(label < classes, "{}: label {} of record {} is out of range for CIFAR-{}",
                   file.string(), label, i, classes);
      labels.push_back(label);
      // Planes R, G, B of 32x32 -> HWC.
      const uint8_t* planes = r + label_bytes;
      for (int64_t p = 0; p < 1024; ++p) {
        for (int64_t c = 0; c < 3; ++c) pixels.push_back(planes[c * 1024 + p]);
      }
    }
  }
  auto dataset = std::make_shared<TensorImageDataset>(std::move(pixels), std::move(labels), 32, 32, 3,
                                                      classes, files.front().string());
  dataset->truncate(options.limit);
  if (classes == 10) dataset->set_class_names(cifar10_class_names());
  return dataset;
}

// ---- image files ------------------------------------------------------------------------------------

ImageFilesDataset::ImageFilesDataset(std::vector<std::string> files, int64_t channels)
    : files_(std::move(files)), channels_(channels) {
  STOKER_CHECK(!files_.empty(), "no image files given");
  STOKER_CHECK(channels == 1 || channels == 3, "images are decoded to 1 (gray) or 3 (RGB) channels, not {}",
               channels);
}

void ImageFilesDataset::read(int64_t index, RawSample& out) const {
  const fs::path path = files_[index];
  STOKER_CHECK(!fs::is_directory(path), "cannot read image {}: it is a folder", path.string());
  std::ifstream in(path, std::ios::binary);
  STOKER_CHECK(in.good(), "cannot read image {}: {}", path.string(),
               fs::exists(path) ? "permission denied" : "no such file");
  out.encoded = true;
  out.label = -1;
  out.opens = 1;
  out.bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  STOKER_CHECK(!in.bad(), "cannot read image {}: read error", path.string());
  STOKER_CHECK(!out.bytes.empty(), "cannot read image {}: the file is empty", path.string());
}

// ---- synthetic ----------------------------------------------------------------------------------------

void SyntheticOptions::visit(OptionsVisitor& v) {
  v.field("train_samples", train_samples, rules::at_least(1));
  v.field("test_samples", test_samples, rules::at_least(1));
  v.field("height", height, rules::at_least(1));
  v.field("width", width, rules::at_least(1));
  v.field("channels", channels, rules::number("1 or 3", 1, 3));
  v.field("cpu_cost_us", cpu_cost_us, rules::at_least(0));
  v.field("slow_from_epoch", slow_from_epoch, rules::at_least(0));
  v.field("slow_read_us", slow_read_us, rules::at_least(0));
}

void SyntheticOptions::check() const {
  if (channels != 1 && channels != 3) STOKER_FAIL("channels must be 1 or 3, got {}", channels);
  if ((slow_from_epoch > 0) != (slow_read_us > 0)) {
    STOKER_FAIL("slow_from_epoch ({}) and slow_read_us ({}) go together: set both (the epoch from which "
                "each read sleeps that long) or neither", slow_from_epoch, slow_read_us);
  }
}

SyntheticDataset::SyntheticDataset(const DatasetOptions& options)
    : options_(options), own_(options.own.as<SyntheticOptions>()) {
  if (options_.num_classes <= 0) options_.num_classes = 10;  // data.num_classes 0: its own ten patterns
  samples_ = options_.split == "train" ? own_.train_samples : own_.test_samples;
  if (samples_ <= 0 || own_.height <= 0 || own_.width <= 0 || (own_.channels != 1 && own_.channels != 3)) {
    STOKER_FAIL("synthetic data needs samples > 0, a positive size and 1 or 3 channels");
  }
  if (options_.split != "train") options_.seed = mix_seed(options_.seed, 0x7e57);
  if (options_.limit > 0) samples_ = std::min(samples_, options_.limit);
  // Each class has its own stripe frequency: a pattern, not a brightness, so that batch
  // normalisation cannot wash the classes together.
  const int64_t w = own_.width;
  for (int64_t c = 0; c < std::max<int64_t>(1, options_.num_classes); ++c) {
    std::vector<uint8_t> row(w);
    for (int64_t x = 0; x < w; ++x) {
      const double phase = 2.0 * M_PI * double(c + 1) * double(x) / double(2 * w);
      row[x] = static_cast<uint8_t>(100.0 + 70.0 * std::sin(phase));
    }
    stripes_.push_back(std::move(row));
  }
}

void SyntheticDataset::read(int64_t index, RawSample& out) const {
  const auto start = std::chrono::steady_clock::now();
  out.encoded = false;
  out.label = index % options_.num_classes;
  Image& im = out.image;
  im.height = own_.height;
  im.width = own_.width;
  im.channels = own_.channels;
  im.pixels.resize(im.height * im.width * im.channels);
  // The class's stripes plus noise.
  uint64_t state = mix_seed(options_.seed, static_cast<uint64_t>(index));
  const std::vector<uint8_t>& stripes = stripes_[out.label];
  const int64_t row = im.width * im.channels;
  for (size_t i = 0; i < im.pixels.size(); i += 8) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    for (size_t k = 0; k < 8 && i + k < im.pixels.size(); ++k) {
      const int64_t x = static_cast<int64_t>((i + k) % row) / im.channels;
      im.pixels[i + k] = static_cast<uint8_t>(stripes[x] + ((state >> (8 * k)) & 0x3f));
    }
  }
  if (own_.cpu_cost_us > 0) {
    // Busy CPU work standing in for an expensive decode.
    const auto until = start + std::chrono::microseconds(own_.cpu_cost_us);
    while (std::chrono::steady_clock::now() < until) {
    }
  }
  if (own_.slow_from_epoch > 0 && out.epoch + 1 >= own_.slow_from_epoch) {
    std::this_thread::sleep_for(std::chrono::microseconds(own_.slow_read_us));  // a slower disk
  }
}

std::string SyntheticDataset::describe(int64_t index) const {
  return fmt::format("synthetic[{}]", index);
}

// ---- registry --------------------------------------------------------------------------------------------

namespace {

void add_stoker_datasets(Registry<DatasetType>& r) {
  r.add("idx", {options_of<IdxOptions>(), [](const DatasetOptions& o) { return load_idx_dataset(o); }});
  r.add("cifar10", [](const DatasetOptions& o) { return load_cifar_dataset(o, 10); });
  r.add("cifar100", [](const DatasetOptions& o) { return load_cifar_dataset(o, 100); });
  r.add("image_folder",
        [](const DatasetOptions& o) { return std::make_shared<ImageFolderDataset>(o); });
  r.add("synthetic", {options_of<SyntheticOptions>(),
                      [](const DatasetOptions& o) { return std::make_shared<SyntheticDataset>(o); }});
  r.add("webdataset", {options_of<WebDatasetOptions>(),
                       [](const DatasetOptions& o) { return std::make_shared<WebDataset>(o); }});
}

}  // namespace

Registry<DatasetType>& dataset_registry() { return lazy_registry<DatasetType, add_stoker_datasets>("dataset"); }

TypedOptions dataset_type_options(const std::string& type) {
  return TypedOptions(type, dataset_registry().get(type).options());
}

std::shared_ptr<Dataset> create_dataset(const DatasetOptions& options) {
  const DatasetType type = dataset_registry().get(options.type);
  if (options.own.type() == options.type) return type.create(options);
  // Options built in code without the type's own keys get that type's defaults.
  DatasetOptions with_defaults = options;
  with_defaults.own = dataset_type_options(options.type);
  return type.create(with_defaults);
}

}  // namespace stoker::data
