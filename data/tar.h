// Tar archives as WebDataset shards hold them: a scanner of member headers that gives each regular
// file's payload as an (offset, size) within the archive, so that a reader can pread it later, and a
// small ustar writer (what `trainer pack` writes).
//
// The scanner reads what real writers produce: POSIX ustar (with the `prefix` field), GNU tar (long
// names in `././@LongLink` members, base-256 sizes), pax (extended headers with `path` and `size`,
// as Python's tarfile writes before members and `tar --format=posix` before every one), old v7
// headers, directory and link entries (skipped), and the zero blocks that end the archive. Every
// header's checksum is verified. Anything else - a truncated archive, a bad checksum, a size past
// the end of the file, garbage - is a stoker::Error naming the archive and the byte offset.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace stoker::data {

// A regular file in a tar archive: its name (after long-name and pax records) and its payload.
struct TarMember {
  std::string name;
  int64_t offset = 0;  // of the payload, from the start of the archive (a multiple of 512)
  int64_t size = 0;    // of the payload, in bytes
};

// Reads up to `n` bytes at `offset` into `out`; returns how many it read (fewer only at the end).
using TarReadAt = std::function<size_t(int64_t offset, size_t n, uint8_t* out)>;

// The regular files of an archive of `size` bytes read through `read_at`, in archive order.
// `name` is the archive's name for messages. Throws stoker::Error on any malformed input.
std::vector<TarMember> scan_tar(const TarReadAt& read_at, int64_t size, const std::string& name);
// The same for bytes in memory, and for a file (read with pread).
std::vector<TarMember> scan_tar(const uint8_t* data, size_t size, const std::string& name);
std::vector<TarMember> scan_tar_file(const std::string& path);

// Writes a ustar archive member by member (names over 100 bytes go into the `prefix` field when
// they split at a '/', else into a pax `path` record). finish() writes the two zero blocks that
// end an archive; an archive without them is incomplete to every reader.
class TarWriter {
 public:
  // Writes to `file` (not closed here); `name` names it in messages; `mtime` goes into each header.
  TarWriter(std::FILE* file, std::string name, int64_t mtime = 0);
  void add(const std::string& member, const uint8_t* data, size_t size);
  void add(const std::string& member, const std::string& bytes) {
    add(member, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  void finish();
  // Bytes written so far.
  int64_t bytes() const { return written_; }

 private:
  void write(const void* data, size_t size);
  void pad();
  void header(const std::string& name, const std::string& prefix, char type, int64_t size);
  std::FILE* file_;
  std::string name_;
  int64_t mtime_;
  int64_t written_ = 0;
};

}  // namespace stoker::data
