#include "common/atomic_write.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace stoker {
namespace fs = std::filesystem;

namespace {
std::string errno_text() { return std::strerror(errno); }

// Closes a file descriptor on scope exit.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};
}  // namespace

void write_file_atomically(const fs::path& path, const std::string& bytes,
                           const std::function<void(size_t)>& after_chunk) {
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  const fs::path tmp = path.string() + ".tmp-" + std::to_string(::getpid());
  Fd file;
  file.fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  STOKER_CHECK(file.fd >= 0, "cannot write {}: {}; check that {} exists and is writable", tmp.string(),
               errno_text(), dir.string());
  try {
    constexpr size_t kChunk = 1 << 20;
    size_t done = 0;
    while (done < bytes.size()) {
      const size_t n = std::min(kChunk, bytes.size() - done);
      const ssize_t wrote = ::write(file.fd, bytes.data() + done, n);
      if (wrote < 0 && errno == EINTR) continue;
      STOKER_CHECK(wrote > 0, "writing {} failed after {} of {} bytes: {}; is the disk full?",
                   tmp.string(), done, bytes.size(), errno_text());
      done += static_cast<size_t>(wrote);
      if (after_chunk) after_chunk(done);
    }
    STOKER_CHECK(::fsync(file.fd) == 0, "flushing {} to disk failed: {}", tmp.string(), errno_text());
    STOKER_CHECK(::close(file.fd) == 0, "closing {} failed: {}", tmp.string(), errno_text());
    file.fd = -1;
    STOKER_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, "renaming {} to {} failed: {}",
                 tmp.string(), path.string(), errno_text());
  } catch (...) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw;
  }
  // Make the rename itself durable.
  Fd folder;
  folder.fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (folder.fd >= 0) ::fsync(folder.fd);
}

}  // namespace stoker
