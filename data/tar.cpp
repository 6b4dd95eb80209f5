// The tar header scanner and the ustar writer (see tar.h). Header layout: POSIX.1-2001 (ustar and
// pax) and GNU tar's manual, "Basic Tar Format".
#include "data/tar.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "common/error.h"

namespace stoker::data {
namespace {

constexpr int64_t kBlock = 512;
// Long-name and pax records larger than this are corrupt, not names.
constexpr int64_t kMaxExtendedHeader = int64_t(1) << 20;

// Field offsets and lengths in a header block.
struct Field {
  int offset, length;
};
constexpr Field kName{0, 100}, kSize{124, 12}, kChecksum{148, 8}, kMagic{257, 6}, kPrefix{345, 155};
constexpr int kTypeflag = 156;

int64_t round_up(int64_t n) { return (n + kBlock - 1) / kBlock * kBlock; }

std::string text_field(const uint8_t* h, Field f) {
  const char* s = reinterpret_cast<const char*>(h + f.offset);
  return std::string(s, strnlen(s, static_cast<size_t>(f.length)));
}

// An octal number (leading spaces, then digits, then spaces or NULs), or GNU's base-256 (high bit
// of the first byte set). -1 when the field holds neither.
int64_t number_field(const uint8_t* h, Field f) {
  const uint8_t* p = h + f.offset;
  if (p[0] & 0x80) {
    if (p[0] != 0x80) return -1;  // negative, or a value too large for int64
    int64_t v = 0;
    for (int i = 1; i < f.length; ++i) {
      if (v > (std::numeric_limits<int64_t>::max() >> 8)) return -1;
      v = (v << 8) | p[i];
    }
    return v;
  }
  int i = 0;
  while (i < f.length && p[i] == ' ') ++i;
  int64_t v = 0;
  for (; i < f.length && p[i] >= '0' && p[i] <= '7'; ++i) {
    if (v > (std::numeric_limits<int64_t>::max() >> 3)) return -1;
    v = v * 8 + (p[i] - '0');
  }
  for (; i < f.length; ++i) {
    if (p[i] != ' ' && p[i] != '\0') return -1;
  }
  return v;
}

bool checksum_ok(const uint8_t* h) {
  const int64_t stored = number_field(h, kChecksum);
  if (stored < 0) return false;
  int64_t unsigned_sum = 0, signed_sum = 0;
  for (int i = 0; i < kBlock; ++i) {
    const bool in_field = i >= kChecksum.offset && i < kChecksum.offset + kChecksum.length;
    unsigned_sum += in_field ? ' ' : h[i];
    signed_sum += in_field ? ' ' : static_cast<int8_t>(h[i]);
  }
  return stored == unsigned_sum || stored == signed_sum;  // old writers summed signed chars
}

// What a long-name or pax header says about the member after it.
struct Pending {
  bool has_name = false, has_size = false;
  std::string name;
  int64_t size = 0;
  int64_t at = -1;  // offset of the first extended header, for messages
};

int64_t parse_decimal(const std::string& s) {
  if (s.empty() || s.size() > 18) return -1;
  int64_t v = 0;
  for (const char c : s) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v;
}

// pax records "<length> <key>=<value>\n"; `path` and `size` are kept, the rest ignored.
void parse_pax(const std::string& data, Pending& pending, const std::string& archive, int64_t at) {
  size_t p = 0;
  while (p < data.size() && data[p] != '\0') {
    const size_t space = data.find(' ', p);
    const int64_t length = space == std::string::npos ? -1 : parse_decimal(data.substr(p, space - p));
    STOKER_CHECK(length > static_cast<int64_t>(space - p) + 1 &&
                     length <= static_cast<int64_t>(data.size() - p) && data[p + length - 1] == '\n',
                 "{}: malformed pax extended header at byte {} (record at byte {} of it); the archive is "
                 "corrupt",
                 archive, at, p);
    const std::string record = data.substr(space + 1, p + length - 1 - (space + 1));
    const size_t eq = record.find('=');
    STOKER_CHECK(eq != std::string::npos && eq > 0,
                 "{}: malformed pax record '{}' in the extended header at byte {}; the archive is corrupt",
                 archive, record.substr(0, 64), at);
    const std::string key = record.substr(0, eq), value = record.substr(eq + 1);
    if (key == "path") {
      pending.has_name = true;
      pending.name = value;
    } else if (key == "size") {
      pending.size = parse_decimal(value);
      STOKER_CHECK(pending.size >= 0, "{}: pax size '{}' in the extended header at byte {} is not a "
                   "number; the archive is corrupt", archive, value.substr(0, 32), at);
      pending.has_size = true;
    }
    p += static_cast<size_t>(length);
  }
}

class Scanner {
 public:
  Scanner(const TarReadAt& read_at, int64_t size, const std::string& name)
      : read_at_(read_at), size_(size), name_(name) {}

  std::vector<TarMember> run() {
    std::vector<TarMember> members;
    for (int64_t pos = 0;;) {
      uint8_t h[kBlock];
      read_header(pos, h);
      if (std::all_of(h, h + kBlock, [](uint8_t b) { return b == 0; })) {
        STOKER_CHECK(pending_.at < 0, "{}: the extended header at byte {} is followed by the end of the "
                     "archive, not by a member; the archive is corrupt", name_, pending_.at);
        return members;
      }
      pos = entry(pos, h, members);
    }
  }

 private:
  void read_header(int64_t pos, uint8_t* h) {
    STOKER_CHECK(pos < size_, "{}: ends at byte {} without the end-of-archive blocks; the archive is "
                 "truncated (copy it again, or re-create it)", name_, pos);
    STOKER_CHECK(size_ - pos >= kBlock, "{}: the header at byte {} is cut off after {} of 512 bytes; the "
                 "archive is truncated", name_, pos, size_ - pos);
    read_exactly(pos, kBlock, h);
  }

  void read_exactly(int64_t pos, int64_t n, uint8_t* out) {
    const size_t got = read_at_(pos, static_cast<size_t>(n), out);
    STOKER_CHECK(static_cast<int64_t>(got) == n, "{}: could read only {} of {} bytes at byte {}", name_,
                 got, n, pos);
  }

  // Handles the entry whose header is at `pos`; returns the offset of the next header.
  int64_t entry(int64_t pos, const uint8_t* h, std::vector<TarMember>& members) {
    STOKER_CHECK(checksum_ok(h), "{}: bad header checksum at byte {}: this is not a tar header (the "
                 "archive is corrupt, or not a tar file)", name_, pos);
    const char type = static_cast<char>(h[kTypeflag]);
    int64_t size = number_field(h, kSize);
    STOKER_CHECK(size >= 0, "{}: the header at byte {} has an unreadable size field; the archive is "
                 "corrupt", name_, pos);
    const bool regular = type == '0' || type == '\0' || type == '7';
    if (regular && pending_.has_size) size = pending_.size;
    const std::string name = member_name(h);
    const int64_t payload = pos + kBlock;
    STOKER_CHECK(size <= size_ - payload, "{}: member '{}' (header at byte {}) claims {} bytes, but only "
                 "{} remain in the file; the archive is truncated or corrupt", name_, name, pos, size,
                 size_ - payload);
    if (type == 'L' || type == 'x') {
      extended(type, pos, payload, size);
    } else if (type == 'g' || type == 'K') {
      // a pax global header, or a GNU long link name: nothing a data set needs
    } else {
      STOKER_CHECK(type != 'S', "{}: member '{}' at byte {} is a GNU sparse file, which shards do not "
                   "support; re-create the archive without --sparse", name_, name, pos);
      // v7 archives mark directories with a trailing '/' instead of a type.
      if (regular && !(type == '\0' && !name.empty() && name.back() == '/')) {
        members.push_back({name, payload, size});
      }
      pending_ = Pending{};
    }
    return payload + round_up(size);
  }

  std::string member_name(const uint8_t* h) const {
    if (pending_.has_name) return pending_.name;
    const std::string name = text_field(h, kName);
    // POSIX ustar ("ustar\0") splits long names into prefix/name; GNU ("ustar  ") uses those bytes
    // for other fields.
    if (std::memcmp(h + kMagic.offset, "ustar\0", 6) == 0) {
      const std::string prefix = text_field(h, kPrefix);
      if (!prefix.empty()) return prefix + "/" + name;
    }
    return name;
  }

  void extended(char type, int64_t pos, int64_t payload, int64_t size) {
    STOKER_CHECK(size <= kMaxExtendedHeader, "{}: the {} header at byte {} claims {} bytes, more than any "
                 "name needs; the archive is corrupt", name_, type == 'L' ? "long-name" : "pax", pos, size);
    std::string data(static_cast<size_t>(size), '\0');
    read_exactly(payload, size, reinterpret_cast<uint8_t*>(data.data()));
    if (pending_.at < 0) pending_.at = pos;
    if (type == 'L') {
      pending_.has_name = true;
      pending_.name = data.substr(0, strnlen(data.c_str(), data.size()));
    } else {
      parse_pax(data, pending_, name_, pos);
    }
  }

  const TarReadAt& read_at_;
  int64_t size_;
  const std::string& name_;
  Pending pending_;
};

}  // namespace

std::vector<TarMember> scan_tar(const TarReadAt& read_at, int64_t size, const std::string& name) {
  return Scanner(read_at, size, name).run();
}

std::vector<TarMember> scan_tar(const uint8_t* data, size_t size, const std::string& name) {
  const TarReadAt read_at = [data, size](int64_t offset, size_t n, uint8_t* out) -> size_t {
    if (offset < 0 || static_cast<size_t>(offset) >= size) return 0;
    const size_t got = std::min(n, size - static_cast<size_t>(offset));
    std::memcpy(out, data + offset, got);
    return got;
  };
  return scan_tar(read_at, static_cast<int64_t>(size), name);
}

std::vector<TarMember> scan_tar_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  STOKER_CHECK(fd >= 0, "{}: cannot open ({})", path, std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  const off_t size = ::lseek(fd, 0, SEEK_END);
  STOKER_CHECK(size >= 0, "{}: cannot find its size ({})", path, std::strerror(errno));
  const TarReadAt read_at = [fd, &path](int64_t offset, size_t n, uint8_t* out) -> size_t {
    size_t got = 0;
    while (got < n) {
      const ssize_t r = ::pread(fd, out + got, n - got, static_cast<off_t>(offset + got));
      if (r < 0 && errno == EINTR) continue;
      STOKER_CHECK(r >= 0, "{}: read error at byte {} ({})", path, offset + got, std::strerror(errno));
      if (r == 0) break;
      got += static_cast<size_t>(r);
    }
    return got;
  };
  return scan_tar(read_at, static_cast<int64_t>(size), path);
}

// ---- writer ----------------------------------------------------------------------------------------

TarWriter::TarWriter(std::FILE* file, std::string name, int64_t mtime)
    : file_(file), name_(std::move(name)), mtime_(mtime) {}

void TarWriter::write(const void* data, size_t size) {
  if (size == 0) return;
  STOKER_CHECK(std::fwrite(data, 1, size, file_) == size, "{}: write failed ({}); is the disk full?", name_,
               std::strerror(errno));
  written_ += static_cast<int64_t>(size);
}

void TarWriter::pad() {
  static const uint8_t zeros[kBlock] = {};
  write(zeros, static_cast<size_t>(round_up(written_) - written_));
}

void TarWriter::header(const std::string& name, const std::string& prefix, char type, int64_t size) {
  STOKER_CHECK(size < (int64_t(1) << 33), "{}: member '{}' is {} bytes; ustar members hold less than 8 GiB",
               name_, name, size);
  uint8_t h[kBlock] = {};
  auto put = [&h](Field f, const std::string& s) { std::memcpy(h + f.offset, s.data(), std::min<size_t>(s.size(), f.length)); };
  put(kName, name);
  put({100, 8}, "0000644");
  put({108, 8}, "0000000");
  put({116, 8}, "0000000");
  put(kSize, fmt::format("{:011o}", size));
  put({136, 12}, fmt::format("{:011o}", std::max<int64_t>(0, mtime_) & 077777777777));
  h[kTypeflag] = static_cast<uint8_t>(type);
  std::memcpy(h + kMagic.offset, "ustar\0" "00", 8);
  put(kPrefix, prefix);
  std::memset(h + kChecksum.offset, ' ', kChecksum.length);
  int64_t sum = 0;
  for (const uint8_t b : h) sum += b;
  const std::string checksum = fmt::format("{:06o}", sum);
  std::memcpy(h + kChecksum.offset, checksum.data(), 6);
  h[kChecksum.offset + 6] = '\0';
  write(h, kBlock);
}

void TarWriter::add(const std::string& member, const uint8_t* data, size_t size) {
  STOKER_CHECK(!member.empty(), "{}: a member needs a name", name_);
  std::string name = member, prefix;
  if (member.size() > 100) {
    // The last split at a '/' that fits both fields.
    for (size_t slash = member.find('/'); slash != std::string::npos; slash = member.find('/', slash + 1)) {
      if (slash <= 155 && member.size() - slash - 1 <= 100 && slash + 1 < member.size()) {
        prefix = member.substr(0, slash);
        name = member.substr(slash + 1);
      }
    }
    if (prefix.empty()) {  // a pax `path` record: "<length> path=<name>\n", the length counting itself
      const std::string body = " path=" + member + "\n";
      size_t length = body.size() + 1;
      while (std::to_string(length).size() + body.size() != length) length = std::to_string(length).size() + body.size();
      const std::string record = std::to_string(length) + body;
      header("././@PaxHeader", "", 'x', static_cast<int64_t>(record.size()));
      write(record.data(), record.size());
      pad();
      name = member.substr(0, 100);
    }
  }
  header(name, prefix, '0', static_cast<int64_t>(size));
  write(data, size);
  pad();
}

void TarWriter::finish() {
  static const uint8_t zeros[2 * kBlock] = {};
  write(zeros, sizeof(zeros));
  STOKER_CHECK(std::fflush(file_) == 0, "{}: write failed ({}); is the disk full?", name_, std::strerror(errno));
}

}  // namespace stoker::data
