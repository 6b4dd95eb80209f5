#include "data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "common/error.h"
#include "common/error_kinds.h"

namespace stoker::data {
namespace {

// An open gzip (or raw: zlib reads those transparently) file; closed on scope exit.
class GzFile {
 public:
  explicit GzFile(const std::filesystem::path& path) : path_(path) {
    file_ = gzopen(path.c_str(), "rb");
    STOKER_CHECK(file_ != nullptr, "{}: cannot open for reading", path.string());
  }
  ~GzFile() { gzclose(file_); }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;

  // Reads up to `n` bytes; returns how many were read. Throws on a corrupt stream.
  size_t read(void* out, size_t n) {
    size_t done = 0;
    while (done < n) {
      const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - done, 1u << 30));
      const int got = gzread(file_, static_cast<char*>(out) + done, chunk);
      if (got < 0) {
        int code = 0;
        const char* msg = gzerror(file_, &code);
        STOKER_FAIL("{}: corrupt compressed data ({}); the file is damaged: reinstall or re-copy it",
                    path_.string(), msg);
      }
      if (got == 0) break;
      done += static_cast<size_t>(got);
    }
    return done;
  }

  // True when a gzip stream ended before its trailer (zlib reports Z_BUF_ERROR then).
  bool truncated_stream() {
    int code = Z_OK;
    gzerror(file_, &code);
    return code == Z_BUF_ERROR;
  }

 private:
  std::filesystem::path path_;
  gzFile file_ = nullptr;
};

// Reads up to `n` bytes into `out`, growing it by at most kChunk bytes at a time as data arrives.
// Returns how many were read (out.size()).
size_t read_up_to(GzFile& file, std::vector<uint8_t>& out, size_t n) {
  constexpr size_t kChunk = size_t(16) << 20;
  while (out.size() < n) {
    const size_t done = out.size();
    const size_t want = std::min(n - done, kChunk);
    out.resize(done + want);
    const size_t got = file.read(out.data() + done, want);
    out.resize(done + got);
    if (got < want) break;
  }
  return out.size();
}

uint32_t big_endian_u32(const unsigned char* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

}  // namespace

torch::Tensor read_idx(const std::filesystem::path& path) {
  const std::string name = path.string();
  STOKER_CHECK_FOUND(std::filesystem::exists(path), "{}: file not found", name);
  STOKER_CHECK(std::filesystem::is_regular_file(path), "{}: not a regular file", name);
  GzFile file(path);

  // Header: two zero bytes, a type code, the number of dimensions, then one u32 per dimension.
  std::array<unsigned char, 4> magic{};
  STOKER_CHECK(file.read(magic.data(), 4) == 4, "{}: truncated IDX file (no 4-byte header)", name);
  STOKER_CHECK(magic[0] == 0 && magic[1] == 0,
               "{}: not an IDX file (first bytes {:#04x} {:#04x}, expected 0x00 0x00)", name,
               magic[0], magic[1]);
  STOKER_CHECK(magic[2] == 0x08,
               "{}: IDX element type {:#04x} is not supported; Stoker reads unsigned bytes (0x08)",
               name, magic[2]);
  const int ndim = magic[3];
  STOKER_CHECK(ndim >= 1 && ndim <= 4, "{}: IDX file claims {} dimensions; expected 1 to 4", name,
               ndim);

  std::vector<unsigned char> dim_bytes(4 * ndim);
  STOKER_CHECK(file.read(dim_bytes.data(), dim_bytes.size()) == dim_bytes.size(),
               "{}: truncated IDX file (header ends inside the dimension sizes)", name);
  std::vector<int64_t> shape;
  int64_t count = 1;
  for (int d = 0; d < ndim; ++d) {
    const int64_t n = big_endian_u32(dim_bytes.data() + 4 * d);
    STOKER_CHECK(n > 0 && n < (int64_t(1) << 31), "{}: dimension {} has size {}; the header is corrupt",
                 name, d, n);
    shape.push_back(n);
    // Checked before multiplying: four sizes below 2^31 overflow int64 (found by fuzz_idx).
    constexpr int64_t kMaxCount = int64_t(1) << 36;
    STOKER_CHECK(n < kMaxCount / count, "{}: header claims {} elements; the header is corrupt", name,
                 fmt::format("{}", fmt::join(shape, "x")));
    count *= n;
  }

  // The header's count is only a claim: memory grows with the data actually read, so a corrupt
  // or hostile header (up to 2^36 bytes) fails as truncated instead of allocating that much.
  auto bytes = std::make_unique<std::vector<uint8_t>>();
  const size_t got = read_up_to(file, *bytes, static_cast<size_t>(count));
  STOKER_CHECK(got == static_cast<size_t>(count) && !file.truncated_stream(),
               "{}: truncated IDX file: the header announces {} bytes of data ({}), but only {} could "
               "be read; the file is incomplete: reinstall or re-copy it",
               name, count, fmt::join(shape, "x"), got);
  unsigned char extra = 0;
  STOKER_CHECK(file.read(&extra, 1) == 0,
               "{}: the file is longer than its IDX header says ({} data bytes); it is probably "
               "not the file it is named after",
               name, count);
  std::vector<uint8_t>* owner = bytes.release();
  return torch::from_blob(owner->data(), shape, [owner](void*) { delete owner; }, torch::kUInt8);
}

namespace {

// `<root>/<stem>.gz` if present, else `<root>/<stem>`; names both when neither exists.
std::filesystem::path find_idx(const std::filesystem::path& root, const std::string& stem) {
  const auto gz = root / (stem + ".gz");
  if (std::filesystem::exists(gz)) return gz;
  const auto raw = root / stem;
  if (std::filesystem::exists(raw)) return raw;
  throw NotFoundError(fmt::format(
      "IDX file not found: neither {} nor {} exists. For Fashion-MNIST install Debian's "
      "dataset-fashion-mnist (apt-get install dataset-fashion-mnist, or ./stoker.sh build), or set "
      "data.root to the folder holding the files",
      gz.string(), raw.string()));
}

}  // namespace

ImageSet load_idx_split(const std::filesystem::path& root, const std::string& prefix,
                        int64_t num_classes) {
  STOKER_CHECK_FOUND(std::filesystem::is_directory(root),
               "data folder {} does not exist. For Fashion-MNIST install Debian's "
               "dataset-fashion-mnist (apt-get install dataset-fashion-mnist), or set data.root",
               root.string());
  const auto image_path = find_idx(root, prefix + "-images-idx3-ubyte");
  const auto label_path = find_idx(root, prefix + "-labels-idx1-ubyte");
  torch::Tensor images = read_idx(image_path);
  torch::Tensor labels = read_idx(label_path);
  STOKER_CHECK(images.dim() == 3, "{}: expected an image file with 3 dimensions (N, H, W), got {}",
               image_path.string(), images.dim());
  STOKER_CHECK(labels.dim() == 1, "{}: expected a label file with 1 dimension (N), got {}",
               label_path.string(), labels.dim());
  STOKER_CHECK(images.size(0) == labels.size(0),
               "{} holds {} images but {} holds {} labels; the two files do not belong together",
               image_path.string(), images.size(0), label_path.string(), labels.size(0));
  const int64_t max_label = labels.max().item<int64_t>();
  if (num_classes > 0 && max_label >= num_classes) {
    const int64_t at = labels.argmax().item<int64_t>();
    STOKER_FAIL("{}: label {} of sample {} is out of range for data.num_classes = {}; fix the file "
                "or raise data.num_classes",
                label_path.string(), max_label, at, num_classes);
  }
  ImageSet set;
  set.images = images.unsqueeze(1);  // [N, 1, H, W]
  set.labels = labels.to(torch::kInt64);
  set.source = image_path.string();
  return set;
}

}  // namespace stoker::data
