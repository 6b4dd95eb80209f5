// The webdataset data set type (webdataset.h): shards indexed on open, samples read with pread.
#include "data/webdataset.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/log.h"

namespace stoker::data {

void WebDatasetOptions::visit(OptionsVisitor& v) {
  v.field("shards", shards, rules::described("shard paths: brace patterns (train-{000000..000127}.tar), "
                                             "lists joined by ::, or a folder"));
  v.field("test_shards", test_shards, rules::described("shard paths, as for shards"));
  v.field("image_extensions", image_extensions,
          rules::matching("^ *[A-Za-z0-9._-]+( +[A-Za-z0-9._-]+)* *$", "extensions separated by spaces"));
  v.field("label", label, rules::one_of({"cls", "json"}));
  v.field("json_label_field", json_label_field, rules::non_empty());
  v.field("index_cache", index_cache, rules::described("a folder path"));
  v.field("channels", channels, rules::number("1 or 3", 1, 3));
  v.field("order", order, rules::one_of({"global", "shard_window"}));
  v.field("shard_window", shard_window, rules::at_least(1));
}

void WebDatasetOptions::check() const {
  if (channels != 1 && channels != 3) STOKER_FAIL("channels must be 1 or 3, got {}", channels);
  if (shard_window < 1) STOKER_FAIL("shard_window must be at least 1 shard, got {}", shard_window);
}

namespace {

std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

std::string extensions_of(const WdsSample& s) {
  std::string out;
  for (const WdsMember& m : s.members) out += (out.empty() ? "" : ", ") + m.ext;
  return out;
}

// The shard list of `split` (timm's names: train, validation) from `<root>/_info.json`, with the
// samples each shard holds; empty when there is no such file.
std::string shards_from_info(const std::string& root, const std::string& split, std::vector<int64_t>& lengths) {
  const std::filesystem::path file = std::filesystem::path(root) / "_info.json";
  if (root.empty() || !std::filesystem::is_regular_file(file)) return "";
  std::ifstream in(file);
  const nlohmann::json info = nlohmann::json::parse(in, nullptr, false);
  const nlohmann::json* names = nullptr;
  if (!info.is_discarded() && info.contains("splits") && info["splits"].contains(split)) {
    const nlohmann::json& s = info["splits"][split];
    if (s.contains("filenames") && s["filenames"].is_array()) names = &s["filenames"];
    if (s.contains("shard_lengths") && s["shard_lengths"].is_array()) {
      for (const auto& n : s["shard_lengths"]) lengths.push_back(n.is_number_integer() ? n.get<int64_t>() : -1);
    }
  }
  STOKER_CHECK(names != nullptr, "{} names no shards for the {} split (splits.{}.filenames); set "
               "data.webdataset.{}", file.string(), split, split, split == "train" ? "shards" : "test_shards");
  std::string spec;
  for (const auto& name : *names) {
    STOKER_CHECK(name.is_string(), "{}: splits.{}.filenames holds a non-string", file.string(), split);
    spec += (spec.empty() ? "" : "::") + name.get<std::string>();
  }
  return spec;
}

// `<root>/_info.json`'s num_classes (timm's layout and `trainer pack` write it); 0 without one.
int64_t num_classes_from_info(const std::string& root) {
  const std::filesystem::path file = std::filesystem::path(root) / "_info.json";
  if (root.empty() || !std::filesystem::is_regular_file(file)) return 0;
  std::ifstream in(file);
  const nlohmann::json info = nlohmann::json::parse(in, nullptr, false);
  if (info.is_discarded() || !info.contains("num_classes") || !info["num_classes"].is_number_integer()) return 0;
  return info["num_classes"].get<int64_t>();
}

// The class names `trainer pack` wrote into `<root>/_info.json` (timm's layout has none); empty
// without them.
std::vector<std::string> class_names_from_info(const std::string& root) {
  const std::filesystem::path file = std::filesystem::path(root) / "_info.json";
  if (root.empty() || !std::filesystem::is_regular_file(file)) return {};
  std::ifstream in(file);
  const nlohmann::json info = nlohmann::json::parse(in, nullptr, false);
  if (info.is_discarded() || !info.contains("class_names")) return {};
  const nlohmann::json& names = info["class_names"];
  STOKER_CHECK(names.is_array(), "{}: class_names must be a list of names", file.string());
  std::vector<std::string> out;
  for (const auto& n : names) {
    STOKER_CHECK(n.is_string(), "{}: class_names holds a non-string", file.string());
    out.push_back(n.get<std::string>());
  }
  return out;
}

}  // namespace

WebDataset::WebDataset(const DatasetOptions& options)
    : own_(options.own.as<WebDatasetOptions>()), num_classes_(options.num_classes) {
  const bool train = options.split == "train";
  std::string spec = train ? own_.shards : own_.test_shards;
  std::vector<int64_t> lengths;  // from _info.json, checked against the shards
  if (spec.empty()) spec = shards_from_info(options.root, train ? "train" : "validation", lengths);
  STOKER_CHECK(!spec.empty(), "data.webdataset.{} is empty and data.root ({}) has no _info.json; set it to the {} "
               "shards (e.g. {}-{{000000..000009}}.tar or a folder of .tar files)", train ? "shards" : "test_shards",
               options.root, train ? "training" : "evaluation", train ? "train" : "val");
  set_class_names(options);
  STOKER_CHECK(num_classes_ > 0, "data.num_classes must be set for webdataset shards without an _info.json "
               "that says it (labels come from the samples' {} members)", own_.label);
  image_exts_ = words(own_.image_extensions);
  shards_ = expand_shard_list(spec, options.root);
  STOKER_CHECK(shards_.size() < (size_t(1) << 31), "{} shards are too many", shards_.size());
  int64_t cached = 0;
  for (size_t k = 0; k < shards_.size(); ++k) {
    ShardIndex index = index_shard(shards_[k], own_.index_cache);
    cached += index.from_cache ? 1 : 0;
    STOKER_CHECK(lengths.size() != shards_.size() || lengths[k] == static_cast<int64_t>(index.samples.size()),
                 "{}/_info.json says {} holds {} samples, but it holds {}; the shard or _info.json was changed "
                 "after packing", options.root, shards_[k], lengths[k], index.samples.size());
    for (WdsSample& s : index.samples) {
      Entry e;
      e.shard = static_cast<int32_t>(k);
      for (const std::string& ext : image_exts_) {
        if (const WdsMember* m = s.find(ext)) {
          e.image = static_cast<int32_t>(m - s.members.data());
          break;
        }
      }
      if (const WdsMember* m = s.find(own_.label)) e.label = static_cast<int32_t>(m - s.members.data());
      entries_.push_back(e);
      samples_.push_back(std::move(s));
      if (options.limit > 0 && size() >= options.limit) break;
    }
    if (options.limit > 0 && size() >= options.limit) break;
  }
  logger().info("webdataset {}: {} samples in {} shards ({} indexes read from the cache, {} built)",
                options.split, size(), shards_.size(), cached, static_cast<int64_t>(shards_.size()) - cached);
  fds_ = std::make_unique<std::atomic<int>[]>(shards_.size());
  for (size_t k = 0; k < shards_.size(); ++k) fds_[k].store(-1);
}

WebDataset::~WebDataset() {
  for (size_t k = 0; k < shards_.size(); ++k) {
    const int fd = fds_[k].load();
    if (fd >= 0) ::close(fd);
  }
}

int WebDataset::fd(int32_t shard) const {
  int fd = fds_[shard].load(std::memory_order_acquire);
  if (fd >= 0) return fd;
  const int opened = ::open(shards_[shard].c_str(), O_RDONLY | O_CLOEXEC);
  STOKER_CHECK(opened >= 0, "shard {}: cannot open ({}){}", shards_[shard], std::strerror(errno),
               errno == EMFILE ? "; raise the open-file limit (ulimit -n)" : "");
  int expected = -1;
  if (fds_[shard].compare_exchange_strong(expected, opened, std::memory_order_acq_rel)) return opened;
  ::close(opened);  // another thread opened it first
  return expected;
}

void WebDataset::pread_member(int32_t shard, const WdsMember& m, std::vector<uint8_t>& out) const {
  out.resize(static_cast<size_t>(m.size));
  const int file = fd(shard);
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t r = ::pread(file, out.data() + got, out.size() - got, static_cast<off_t>(m.offset + got));
    if (r < 0 && errno == EINTR) continue;
    STOKER_CHECK(r > 0, "shard {}: the {} member at bytes {}..{} {}; the shard changed after it was indexed, or is "
                 "damaged", shards_[shard], m.ext, m.offset, m.offset + m.size,
                 r < 0 ? fmt::format("cannot be read ({})", std::strerror(errno)) : std::string("is cut off"));
    got += static_cast<size_t>(r);
  }
}

int64_t WebDataset::parse_label(const Entry& e, const WdsSample& s) const {
  const std::string name = shards_[e.shard] + ":" + s.key;
  STOKER_CHECK(e.label >= 0, "sample {} has no '{}' member for its label (it has: {})", name, own_.label,
               extensions_of(s));
  const WdsMember& m = s.members[e.label];
  STOKER_CHECK(m.size <= (1 << 20), "sample {}: its {} member is {} bytes, too large for a label", name, m.ext,
               m.size);
  std::vector<uint8_t> bytes;
  pread_member(e.shard, m, bytes);
  const std::string text(bytes.begin(), bytes.end());
  int64_t label = -1;
  if (own_.label == "cls") {
    size_t used = 0;
    try {
      label = std::stoll(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    const bool rest_blank = text.find_first_not_of(" \t\r\n", used) == std::string::npos;
    STOKER_CHECK(used > 0 && rest_blank, "sample {}: its cls member '{}' is not an integer label", name,
                 text.substr(0, 40));
  } else {
    const nlohmann::json json = nlohmann::json::parse(text, nullptr, false);
    STOKER_CHECK(!json.is_discarded() && json.is_object(), "sample {}: its json member is not a JSON object",
                 name);
    const auto field = json.find(own_.json_label_field);
    STOKER_CHECK(field != json.end() && field->is_number_integer(), "sample {}: its json member has no integer "
                 "field '{}' (data.webdataset.json_label_field)", name, own_.json_label_field);
    label = field->get<int64_t>();
  }
  STOKER_CHECK(label >= 0 && label < num_classes_, "sample {}: label {} is out of range for {} classes; fix the "
               "shard or set data.num_classes", name, label, num_classes_);
  return relabel_.empty() ? label : relabel_[static_cast<size_t>(label)];
}

void WebDataset::set_class_names(const DatasetOptions& options) {
  if (num_classes_ == 0) num_classes_ = num_classes_from_info(options.root);
  class_names_ = class_names_from_info(options.root);
  if (class_names_.empty()) return;
  const std::string info = (std::filesystem::path(options.root) / "_info.json").string();
  STOKER_CHECK(num_classes_ == 0 || num_classes_ == static_cast<int64_t>(class_names_.size()),
               "{} names {} classes but data.num_classes is {}; make them agree, or leave data.num_classes out",
               info, class_names_.size(), num_classes_);
  num_classes_ = static_cast<int64_t>(class_names_.size());
  if (options.class_names.empty() || options.class_names == class_names_) return;
  // Labels are indices into the shards' own names: another order (a checkpoint's) is a relabelling.
  for (const std::string& name : class_names_) {
    const auto it = std::find(options.class_names.begin(), options.class_names.end(), name);
    STOKER_CHECK(it != options.class_names.end() && options.class_names.size() == class_names_.size(),
                 "{} names the classes {}, which are not those of {} ({}); labels would be wrong", info,
                 fmt::join(class_names_, ", "), options.class_names_source, fmt::join(options.class_names, ", "));
    relabel_.push_back(static_cast<int64_t>(it - options.class_names.begin()));
  }
  class_names_ = options.class_names;
}

void WebDataset::read(int64_t index, RawSample& out) const {
  const Entry& e = entries_[index];
  const WdsSample& s = samples_[index];
  STOKER_CHECK(e.image >= 0, "sample {} has no image member ({}; it has: {}); set "
               "data.webdataset.image_extensions", describe(index), own_.image_extensions, extensions_of(s));
  out.encoded = true;
  out.opens = fds_[e.shard].load(std::memory_order_acquire) < 0 ? 1 : 0;  // the shard's first read opens it
  out.label = parse_label(e, s);
  pread_member(e.shard, s.members[e.image], out.bytes);
}

Dataset::ShardLayout WebDataset::shard_layout() const {
  ShardLayout layout;
  if (own_.order != "shard_window") return layout;
  layout.window = own_.shard_window;
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (i + 1 == entries_.size() || entries_[i + 1].shard != entries_[i].shard) layout.ends.push_back(static_cast<int64_t>(i) + 1);
  }
  return layout;
}

std::string WebDataset::describe(int64_t index) const {
  return shards_[entries_[index].shard] + ":" + samples_[index].key;
}

}  // namespace stoker::data
