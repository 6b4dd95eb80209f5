// WebDataset tar shards (the convention of timm, NVIDIA DALI, LitData and Hugging Face): a sample is
// the run of consecutive members that share a key - the member's path up to the first dot of its
// base name - and each member is one field of it, named by the rest (`n01440764_10026.jpg`,
// `n01440764_10026.cls`). Hidden members and `__*__` members are no samples' fields.
//
// Each shard is indexed once (every sample's members as (offset, size) in the shard) and the index
// cached beside it, or in a cache folder where the shard's folder is not writable, as a DALI
// `wds2idx` v1.2 index; a read is then one pread per member.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/tar.h"

namespace stoker::data {

struct WdsMember {
  std::string ext;  // what follows the key's dot: "jpg", "cls", "seg.png"; the name is key + "." + ext
  int64_t offset = 0, size = 0;
};
struct WdsSample {
  std::string key;
  std::vector<WdsMember> members;
  const WdsMember* find(const std::string& ext) const;
};

// Splits a member name into key and extension as WebDataset does; false for names that are no
// sample's field (hidden, `__*__`, no dot in the base name).
bool split_member_name(const std::string& name, std::string& key, std::string& ext);
// Groups an archive's members into samples. `shard` names the archive in messages; a sample with
// two members of the same extension is an error.
std::vector<WdsSample> group_samples(const std::vector<TarMember>& members, const std::string& shard);

// Expands a shard list: `::`-separated items, each a path with brace patterns (`{000000..000127}`
// keeps the zero padding, `{a,b}` lists alternatives, several braces multiply) or a folder (its
// `.tar` files, sorted). Relative paths are taken from `root` when it is not empty. Every expanded
// file must exist.
std::vector<std::string> expand_shard_list(const std::string& spec, const std::string& root);
// Brace expansion alone (no file checks).
std::vector<std::string> expand_braces(const std::string& pattern);

// The samples of one shard, from its cached index when that is current (same shard size and
// modification time), else by scanning the shard and caching the result: beside the shard
// (`train-000000.tar` -> `train-000000.idx`) or, where that folder is not writable, in
// `cache_dir` (empty: $STOKER_CACHE/wds-index, by default ~/.cache/stoker/wds-index).
struct ShardIndex {
  std::vector<WdsSample> samples;
  std::string index_file;  // where the index was read or written ("" when it could not be cached)
  bool from_cache = false;
};
ShardIndex index_shard(const std::string& shard, const std::string& cache_dir);
// The index file's text, and its parse (empty when the text is not a current index of a shard of
// `shard_bytes` bytes modified at `mtime_ns`).
std::string format_shard_index(const std::vector<WdsSample>& samples, int64_t shard_bytes, int64_t mtime_ns);
bool parse_shard_index(const std::string& text, int64_t shard_bytes, int64_t mtime_ns,
                       std::vector<WdsSample>& samples);

// The webdataset data set type's own keys (data.webdataset: ...).
struct WebDatasetOptions : TypeOptionsOf<WebDatasetOptions> {
  std::string shards;       // training shards (see expand_shard_list)
  std::string test_shards;  // evaluation shards
  std::string image_extensions = "jpg jpeg png";  // the image member: the first of these present
  std::string label = "cls";                      // cls (an ASCII integer) or json (a field of it)
  std::string json_label_field = "label";         // the field of the json member with label: json
  std::string index_cache;                        // where indexes go when a shard's folder is read-only
  int64_t channels = 3;                           // the images decoded to 1 (gray) or 3 (RGB) channels
  // The training order: global (one shuffle of all samples) or shard_window (the shards shuffled,
  // then the samples within each group of shard_window shards; SamplerOptions::shard_window).
  std::string order = "global";
  int64_t shard_window = 4;
  void visit(OptionsVisitor& v) override;
  void check() const override;
};

// The data set of a split's shards. read() preads the image and the label member; a sample without
// one, or with an unreadable label, is a bad sample (data.on_bad_sample), named "<shard>:<key>".
class WebDataset : public Dataset {
 public:
  explicit WebDataset(const DatasetOptions& options);
  ~WebDataset() override;
  int64_t size() const override { return static_cast<int64_t>(entries_.size()); }
  int64_t num_classes() const override { return num_classes_; }
  int64_t channels() const override { return own_.channels; }
  void read(int64_t index, RawSample& out) const override;
  std::string describe(int64_t index) const override;
  const std::vector<std::string>& shards() const { return shards_; }
  ShardLayout shard_layout() const override;
  // The class names _info.json holds (`trainer pack` writes them), in the order `options.class_names`
  // asks for when given; empty when it has none.
  std::vector<std::string> class_names() const override { return class_names_; }

 private:
  struct Entry {
    int32_t shard = 0;
    int32_t image = -1, label = -1;  // members of `samples_[index]`, -1 when absent
  };
  int fd(int32_t shard) const;
  void pread_member(int32_t shard, const WdsMember& m, std::vector<uint8_t>& out) const;
  int64_t parse_label(const Entry& e, const WdsSample& s) const;
  void set_class_names(const DatasetOptions& options);

  WebDatasetOptions own_;
  int64_t num_classes_;
  std::vector<std::string> shards_;
  std::vector<WdsSample> samples_;
  std::vector<Entry> entries_;
  std::vector<std::string> image_exts_;
  std::vector<std::string> class_names_;
  std::vector<int64_t> relabel_;  // the shards' label -> the label asked for (empty: the same)
  std::unique_ptr<std::atomic<int>[]> fds_;  // opened on first read, -1 before
};

}  // namespace stoker::data
