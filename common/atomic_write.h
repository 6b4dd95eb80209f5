// Writing a file so that a crash or a full disk never leaves it half-written: the old content or
// the whole new content, nothing in between. Used for checkpoints, configs and exported weights.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

namespace stoker {

// Writes `bytes` to `path` so that `path` is either its old content or the whole new content, never
// a mix: write to `<path>.tmp-<pid>` in the same folder, flush and fsync it, rename it over `path`,
// fsync the folder. `after_chunk(bytes_written)` is called after each chunk; tests use it to cut a
// write short. Throws stoker::Error naming the file on any failure (and removes the temporary).
void write_file_atomically(const std::filesystem::path& path, const std::string& bytes,
                           const std::function<void(size_t)>& after_chunk = {});

}  // namespace stoker
