// Datasets hand out raw samples: encoded bytes (JPEG/PNG files) or already-decoded uint8 pixels
// (IDX, CIFAR, synthetic). Decoding and transforms are separate pipeline stages (data/pipeline.h).
// Datasets are selected by `data.type` through dataset_registry().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "common/options.h"
#include "common/registry.h"
#include "data/decode.h"

namespace stoker::data {

// One sample as the dataset stores it. Exactly one of `bytes` (encoded) or `image` (decoded) is used.
struct RawSample {
  bool encoded = false;
  std::vector<uint8_t> bytes;  // the file's contents when encoded
  Image image;                 // HWC uint8 when not encoded
  int64_t label = 0;
  // Set by the Loader before read: the epoch the sample is read for, from 0 (0 elsewhere). A data set may
  // read it (the synthetic data set's slow_from_epoch); the sample's pixels must not depend on it.
  int64_t epoch = 0;
  int64_t opens = 0;           // files this read opened (the pipeline zeroes it before each read)
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual int64_t num_classes() const = 0;
  // Channels of the decoded images (1 or 3).
  virtual int64_t channels() const = 0;
  // Height and width when every sample has the same size (IDX, CIFAR, synthetic); 0 when they vary.
  virtual int64_t height() const { return 0; }
  virtual int64_t width() const { return 0; }
  // Stage 1: fetch sample `index` into `out` (reusing its buffers). Thread-safe.
  virtual void read(int64_t index, RawSample& out) const = 0;
  // Names a sample for messages: its file, or "<file>[index]".
  virtual std::string describe(int64_t index) const = 0;
  // The name of each class by label (ImageFolder's folder names, Fashion-MNIST's and CIFAR-10's
  // published names); empty when the data set has none (classes are then shown as indices).
  virtual std::vector<std::string> class_names() const { return {}; }
  // Where the samples sit in shards that are cheaper to read in runs (WebDataset tars): each
  // non-empty shard's end index (ascending, the last equal to size()), and the shard window of the
  // sampler's shard-locality order (SamplerOptions::shard_window; 0: a global shuffle).
  struct ShardLayout {
    std::vector<int64_t> ends;
    int64_t window = 0;
  };
  virtual ShardLayout shard_layout() const { return {}; }
};

// Options for building a dataset split: what every data set type takes, plus the type's own keys
// (`data.<type>:` in a config, e.g. data.synthetic.height), declared by the type's options struct.
struct DatasetOptions {
  std::string type = "idx";
  std::string root;
  std::string split = "train";  // train | test
  int64_t num_classes = 10;     // 0: whatever the data has
  int64_t limit = 0;            // keep only the first N samples (0 = all)
  uint64_t seed = 0;
  TypedOptions own;             // the type's own options (NoOptions for types without keys)
  // The classes this split must have, by label: the training split's names for the test split, a
  // checkpoint's for its evaluation. A data set that names its classes (image folders) gives its
  // samples these labels, and refuses a class of its own that is not among them or a missing one,
  // listing both; `class_names_source` says whose they are in that message ("the training split").
  // Empty: the data set's own order.
  std::vector<std::string> class_names;
  std::string class_names_source = "the training split";
  // Image folders in the flat layout (<root>/<class>/): the share of each class held out as the test
  // split, seeded with `seed` (data.val_split); 0: the folders have train/ and val/.
  double val_split = 0;
};

// The synthetic data set's own keys.
struct SyntheticOptions : TypeOptionsOf<SyntheticOptions> {
  int64_t train_samples = 10000;
  int64_t test_samples = 1000;
  int64_t height = 32, width = 32, channels = 3;
  int64_t cpu_cost_us = 0;  // busy CPU time per sample, standing in for an expensive decode
  // From epoch slow_from_epoch on (counted from 1, as the log counts them; 0 = never), each read also
  // sleeps slow_read_us: an input cost that rises mid-run (a slower disk), for data.autotune:
  // continuous. A sleep, not busy CPU, so that more workers cure it even on few cores; a function of
  // the epoch alone, so the same whatever the worker count or the number of processes.
  int64_t slow_from_epoch = 0;
  int64_t slow_read_us = 0;
  void visit(OptionsVisitor& v) override;
  void check() const override;
};

// The idx data set's own keys: `class_names: fashion_mnist` gives Fashion-MNIST's ten names
// (IDX files carry none); `indices` (the default, right for MNIST's digits) gives none.
// `classes: [5, 6, 7, 8, 9]` keeps only the samples of those labels, in both splits, relabelled 0, 1,
// ... in the order given (data.num_classes must then be how many: 5), for transfer experiments (a
// network pretrained on some classes, fine-tuned on the others). `train_per_class: 50` keeps the first
// 50 training samples of each class (few labels; the test split stays whole); 0 = all.
struct IdxOptions : TypeOptionsOf<IdxOptions> {
  std::string class_names = "indices";
  std::vector<int64_t> classes;
  int64_t train_per_class = 0;
  void visit(OptionsVisitor& v) override;
  void check() const override;
};
// Fashion-MNIST's and CIFAR-10's class names, by label (as their publishers list them).
const std::vector<std::string>& fashion_mnist_class_names();
const std::vector<std::string>& cifar10_class_names();

using DatasetFactory = std::function<std::shared_ptr<Dataset>(const DatasetOptions&)>;
// A registered data set type: its own options (none by default) and its factory. Applications
// register theirs with dataset_registry().add("name", {options_of<MyOptions>(), factory}) or, for a
// type without keys of its own, dataset_registry().add("name", factory).
struct DatasetType {
  template <typename F, typename = std::enable_if_t<std::is_invocable_v<F, const DatasetOptions&>>>
  DatasetType(F create) : create(std::move(create)) {}  // NOLINT: implicit, for add(name, factory)
  DatasetType(OptionsMaker options, DatasetFactory create)
      : options(std::move(options)), create(std::move(create)) {}
  OptionsMaker options = options_of<NoOptions>();
  DatasetFactory create;
};
Registry<DatasetType>& dataset_registry();
// The default options of a registered data set type, as DatasetOptions::own expects them.
TypedOptions dataset_type_options(const std::string& type);
std::shared_ptr<Dataset> create_dataset(const DatasetOptions& options);

// An in-memory set of equally sized images: IDX and CIFAR load into this.
class TensorImageDataset : public Dataset {
 public:
  // images: uint8 [N, H, W, C] contiguous; labels: int64 [N].
  TensorImageDataset(std::vector<uint8_t> images, std::vector<int64_t> labels, int64_t height,
                     int64_t width, int64_t channels, int64_t num_classes, std::string source);
  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  int64_t num_classes() const override { return num_classes_; }
  int64_t channels() const override { return channels_; }
  int64_t height() const override { return height_; }
  int64_t width() const override { return width_; }
  void read(int64_t index, RawSample& out) const override;
  std::string describe(int64_t index) const override;
  // Keeps only the first n samples.
  void truncate(int64_t n);
  std::vector<std::string> class_names() const override { return class_names_; }
  void set_class_names(std::vector<std::string> names) { class_names_ = std::move(names); }

 private:
  std::vector<uint8_t> images_;
  std::vector<int64_t> labels_;
  int64_t height_, width_, channels_, num_classes_;
  std::string source_;
  std::vector<std::string> class_names_;
};

// IDX (MNIST / Fashion-MNIST): `<root>/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]`.
std::shared_ptr<Dataset> load_idx_dataset(const DatasetOptions& options);
// CIFAR-10/100 binary batches: `<root>/data_batch_{1..5}.bin` + `test_batch.bin` (CIFAR-10) or
// `<root>/train.bin` + `test.bin` (CIFAR-100, fine labels).
std::shared_ptr<Dataset> load_cifar_dataset(const DatasetOptions& options, int64_t classes);

// ImageFolder: data/image_folder.h.

// Image files named one by one (what `trainer predict` classifies): JPEG or PNG, of any size,
// decoded to `channels` channels (1 gray, 3 RGB). They have no labels: read() gives label -1.
class ImageFilesDataset : public Dataset {
 public:
  ImageFilesDataset(std::vector<std::string> files, int64_t channels);
  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  int64_t num_classes() const override { return 0; }
  int64_t channels() const override { return channels_; }
  // Throws stoker::Error naming the file when it is missing, a folder, unreadable or empty.
  void read(int64_t index, RawSample& out) const override;
  std::string describe(int64_t index) const override { return files_[index]; }

 private:
  std::vector<std::string> files_;
  int64_t channels_;
};

// Random images of a configured size (deterministic per index), with an optional busy CPU cost per
// sample: the way to see, and measure, a starved GPU.
class SyntheticDataset : public Dataset {
 public:
  explicit SyntheticDataset(const DatasetOptions& options);
  int64_t size() const override { return samples_; }
  int64_t num_classes() const override { return options_.num_classes; }
  int64_t channels() const override { return own_.channels; }
  int64_t height() const override { return own_.height; }
  int64_t width() const override { return own_.width; }
  void read(int64_t index, RawSample& out) const override;
  std::string describe(int64_t index) const override;

 private:
  DatasetOptions options_;
  SyntheticOptions own_;
  int64_t samples_ = 0;
  std::vector<std::vector<uint8_t>> stripes_;  // per class: one row of vertical stripes
};

}  // namespace stoker::data
