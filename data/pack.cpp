// `trainer pack`: a data set written as WebDataset shards (pack.h).
#include "data/pack.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <numeric>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>

#include "common/atomic_write.h"
#include "common/error.h"
#include "data/dataset.h"
#include "data/encode.h"
#include "data/tar.h"
#include "data/webdataset.h"

namespace stoker::data {
namespace fs = std::filesystem;
namespace {

// One shard being written: under "<name>.partial" until close() renames it.
class ShardFile {
 public:
  explicit ShardFile(fs::path path) : path_(std::move(path)), partial_(path_.string() + ".partial") {
    file_ = std::fopen(partial_.c_str(), "wb");
    STOKER_CHECK(file_ != nullptr, "cannot write {}: {}", partial_, std::strerror(errno));
    writer_ = std::make_unique<TarWriter>(file_, partial_);
  }
  ~ShardFile() {
    if (file_ == nullptr) return;
    std::fclose(file_);
    std::remove(partial_.c_str());  // not completed: no shard
  }
  TarWriter& writer() { return *writer_; }
  void close() {
    writer_->finish();
    STOKER_CHECK(::fsync(fileno(file_)) == 0, "flushing {} failed: {}", partial_, std::strerror(errno));
    std::FILE* f = file_;
    file_ = nullptr;
    STOKER_CHECK(std::fclose(f) == 0, "closing {} failed: {}", partial_, std::strerror(errno));
    STOKER_CHECK(std::rename(partial_.c_str(), path_.c_str()) == 0, "renaming {} to {} failed: {}", partial_,
                 path_.string(), std::strerror(errno));
  }

 private:
  fs::path path_;
  std::string partial_;
  std::FILE* file_ = nullptr;
  std::unique_ptr<TarWriter> writer_;
};

// The bytes and extension a sample is stored with.
struct Encoded {
  std::vector<uint8_t> bytes;
  const char* ext = "";
};

Encoded encode_sample(const RawSample& raw, const PackOptions& o, const std::string& name) {
  Encoded e;
  if (!raw.encoded) {  // raw pixels (IDX): lossless PNG
    e.bytes = encode_png(fit_within(raw.image, o.max_side), name);
    e.ext = "png";
    return e;
  }
  const ImageInfo info = probe_image(raw.bytes.data(), raw.bytes.size(), name);
  if (o.max_side <= 0 || std::max(info.height, info.width) <= o.max_side) {
    e.bytes = raw.bytes;
    e.ext = info.format == ImageFormat::Png ? "png" : "jpg";
    return e;
  }
  Image full;
  decode_image(raw.bytes.data(), raw.bytes.size(), DecodeOptions{}, full, name);
  e.bytes = encode_jpeg(fit_within(full, o.max_side), o.quality, name);
  e.ext = "jpg";
  return e;
}

// A sample ready to be written.
struct Packed {
  Encoded encoded;
  int64_t label = 0;
  int64_t bytes_read = 0;
};

// Reads and encodes samples order[begin, begin + out.size()) into `out` on `workers` threads; an
// error is rethrown for the first failing sample in order, as a serial pack would have raised it.
void encode_chunk(const Dataset& set, const std::vector<int64_t>& order, size_t begin, const PackOptions& o,
                  int64_t workers, std::vector<Packed>& out) {
  std::vector<std::exception_ptr> errors(out.size());
  std::atomic<size_t> next{0};
  const auto work = [&] {
    RawSample raw;
    for (size_t k = next++; k < out.size(); k = next++) {
      try {
        const int64_t index = order[begin + k];
        set.read(index, raw);
        out[k].encoded = encode_sample(raw, o, set.describe(index));
        out[k].label = raw.label;
        out[k].bytes_read = static_cast<int64_t>(raw.encoded ? raw.bytes.size() : raw.image.pixels.size());
      } catch (...) {
        errors[k] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> threads;
  for (int64_t t = 1; t < std::min<int64_t>(workers, static_cast<int64_t>(out.size())); ++t) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

PackedSplit pack_split(const Dataset& set, const std::string& split, const std::string& prefix, const PackOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  PackedSplit out;
  out.name = split;
  std::vector<int64_t> order(static_cast<size_t>(set.size()));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(o.seed);
  std::shuffle(order.begin(), order.end(), rng);
  const auto limit = static_cast<int64_t>(o.shard_size_mb * 1024 * 1024);
  const int64_t workers = o.workers > 0 ? o.workers : std::max<int64_t>(1, std::thread::hardware_concurrency());
  std::unique_ptr<ShardFile> shard;
  PackProgress progress{split, 0, set.size()};
  auto finish_shard = [&] {
    shard->close();
    shard.reset();
    const fs::path path = fs::path(o.to) / out.shards.back();
    index_shard(path.string(), "");
    out.bytes += static_cast<int64_t>(fs::file_size(path));
    if (o.progress) o.progress(split, out.shards.back(), out.samples, set.size());
  };
  STOKER_CHECK(o.shards <= set.size(), "--shards {}: the {} split has only {} samples; ask for at most that many "
               "shards", o.shards, split, set.size());
  // Whether the open shard is complete before a sample that would make it `too_big`.
  const auto shard_full = [&](const PackedSplit& p, bool too_big) {
    if (o.shards <= 0) return p.lengths.back() > 0 && too_big;
    const auto k = static_cast<int64_t>(p.lengths.size());  // shards so far, the open one included
    const int64_t n = set.size(), per = n / o.shards, extra = n % o.shards;
    return p.samples == k * per + std::min(k, extra);
  };
  std::vector<Packed> chunk;
  for (size_t begin = 0; begin < order.size(); begin += chunk.size()) {
    chunk.assign(std::min<size_t>(order.size() - begin, static_cast<size_t>(32 * workers)), Packed{});
    encode_chunk(set, order, begin, o, workers, chunk);
    for (size_t k = 0; k < chunk.size(); ++k) {
      const Encoded& e = chunk[k].encoded;
      const std::string key = fmt::format("{:08d}", begin + k);
      const int64_t need = 4 * 512 + static_cast<int64_t>(e.bytes.size());
      if (shard && shard_full(out, shard->writer().bytes() + need + 1024 > limit)) finish_shard();
      if (!shard) {
        out.shards.push_back(fmt::format("{}-{:06d}.tar", prefix, out.shards.size()));
        out.lengths.push_back(0);
        shard = std::make_unique<ShardFile>(fs::path(o.to) / out.shards.back());
      }
      shard->writer().add(key + "." + e.ext, e.bytes.data(), e.bytes.size());
      shard->writer().add(key + ".cls", std::to_string(chunk[k].label));
      ++out.lengths.back();
      ++out.samples;
      progress.bytes_read += chunk[k].bytes_read;
      progress.bytes_written += need;
    }
    progress.done = out.samples;
    progress.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (o.advance) o.advance(progress);
  }
  if (shard) finish_shard();
  return out;
}

nlohmann::json split_info(const PackedSplit& s) {
  return {{"name", s.name}, {"num_samples", s.samples}, {"filenames", s.shards}, {"shard_lengths", s.lengths}};
}

}  // namespace

std::string format_pack_progress(const PackProgress& p) {
  const double rate = p.seconds > 0 ? p.bytes_read / 1e6 / p.seconds : 0;
  std::string eta = "?";
  if (p.done > 0) {
    const auto left = static_cast<int64_t>(p.seconds * static_cast<double>(p.total - p.done) / p.done + 0.5);
    eta = left >= 3600 ? fmt::format("{}:{:02d}:{:02d}", left / 3600, left / 60 % 60, left % 60)
                       : fmt::format("{}:{:02d}", left / 60, left % 60);
  }
  const double percent = p.total > 0 ? 100.0 * p.done / p.total : 100.0;
  return fmt::format("{}: {} of {} samples ({:.0f}%), {:.1f} MB/s read, ETA {}", p.split, p.done, p.total,
                     percent, rate, eta);
}

std::vector<PackedSplit> pack_dataset(const PackOptions& o) {
  STOKER_CHECK(o.shard_size_mb > 0, "--shard-size must be positive, not {}", o.shard_size_mb);
  STOKER_CHECK(o.quality >= 1 && o.quality <= 100, "--quality must be 1..100, not {}", o.quality);
  STOKER_CHECK(o.shards >= 0, "--shards must be positive, not {}", o.shards);
  STOKER_CHECK(o.workers >= 0, "--workers must be 0 (the hardware's threads) or more, not {}", o.workers);
  // The parallelism is the workers: OpenCV's own threads would only compete with them.
  if (o.workers != 1) cv::setNumThreads(0);
  const fs::path from = o.from;
  DatasetOptions d;
  d.root = o.from;
  d.num_classes = 0;
  const bool image_folder = fs::is_directory(from / "train");
  const bool idx = fs::exists(from / "train-images-idx3-ubyte") || fs::exists(from / "train-images-idx3-ubyte.gz");
  STOKER_CHECK(image_folder || idx, "--from {}: neither an ImageFolder (train/<class>/*.jpg, and val/) nor an IDX "
               "folder (train-images-idx3-ubyte[.gz], t10k-...)", o.from);
  d.type = image_folder ? "image_folder" : "idx";
  if (idx) d.num_classes = 10;
  fs::create_directories(o.to);
  for (const auto& entry : fs::directory_iterator(o.to)) {
    STOKER_CHECK(entry.path().extension() != ".tar", "--to {} already holds shards ({}); pack into an empty "
                 "folder, or remove them first", o.to, entry.path().filename().string());
  }
  std::vector<PackedSplit> splits;
  std::vector<std::string> class_names;
  int64_t num_classes = 0;
  const bool has_test = !image_folder || fs::is_directory(from / "val") || fs::is_directory(from / "test");
  for (const std::string split : {"train", "test"}) {
    if (split == "test" && !has_test) continue;
    d.split = split;
    const auto set = create_dataset(d);
    num_classes = std::max(num_classes, set->num_classes());
    if (class_names.empty()) class_names = set->class_names();
    splits.push_back(pack_split(*set, split == "train" ? "train" : "validation", split == "train" ? "train" : "val", o));
  }
  fs::path named = fs::absolute(o.to).lexically_normal();
  if (named.filename().empty()) named = named.parent_path();
  nlohmann::json info = {{"name", named.filename().string()},
                         {"num_classes", num_classes},
                         {"splits", nlohmann::json::object()}};
  if (!class_names.empty()) info["class_names"] = class_names;
  for (const PackedSplit& s : splits) info["splits"][s.name] = split_info(s);
  write_file_atomically(fs::path(o.to) / "_info.json", info.dump(2) + "\n");
  return splits;
}

}  // namespace stoker::data
