// WebDataset samples from tar members, shard lists, and the cached per-shard index (webdataset.h).
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include <fmt/format.h>

#include "common/atomic_write.h"
#include "common/error.h"
#include "common/error_kinds.h"
#include "common/log.h"
#include "data/webdataset.h"

namespace stoker::data {
namespace fs = std::filesystem;

const WdsMember* WdsSample::find(const std::string& ext) const {
  for (const WdsMember& m : members) {
    if (m.ext == ext) return &m;
  }
  return nullptr;
}

bool split_member_name(const std::string& name, std::string& key, std::string& ext) {
  const size_t slash = name.rfind('/');
  const size_t base = slash == std::string::npos ? 0 : slash + 1;
  const std::string basename = name.substr(base);
  if (basename.empty() || basename[0] == '.') return false;  // hidden
  if (basename.size() >= 4 && basename.compare(0, 2, "__") == 0 &&
      basename.compare(basename.size() - 2, 2, "__") == 0) {
    return false;  // __key__-style metadata
  }
  const size_t dot = name.find('.', base);
  if (dot == std::string::npos || dot + 1 == name.size()) return false;
  key = name.substr(0, dot);
  ext = name.substr(dot + 1);
  return true;
}

std::vector<WdsSample> group_samples(const std::vector<TarMember>& members, const std::string& shard) {
  std::vector<WdsSample> samples;
  std::string key, ext;
  for (const TarMember& m : members) {
    if (!split_member_name(m.name, key, ext)) continue;
    if (samples.empty() || samples.back().key != key) samples.push_back({key, {}});
    WdsSample& s = samples.back();
    if (const WdsMember* twin = s.find(ext)) {
      STOKER_FAIL("{}: sample '{}' has two '{}' members (at bytes {} and {}); a sample holds one member per "
                  "extension, so the shard was written wrongly",
                  shard, key, ext, twin->offset, m.offset);
    }
    s.members.push_back({ext, m.offset, m.size});
  }
  return samples;
}

// ---- shard lists ----------------------------------------------------------------------------------

namespace {

bool all_digits(const std::string& s) {
  return !s.empty() && s.size() <= 18 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The alternatives of one brace's contents: a numeric range "a..b" (zero-padded to the longer
// bound when either bound starts with 0) or a comma list; anything else is kept as written.
std::vector<std::string> alternatives(const std::string& inside, const std::string& pattern) {
  const size_t dots = inside.find("..");
  if (dots != std::string::npos && all_digits(inside.substr(0, dots)) && all_digits(inside.substr(dots + 2))) {
    const std::string a = inside.substr(0, dots), b = inside.substr(dots + 2);
    const int64_t from = std::stoll(a), to = std::stoll(b);
    STOKER_CHECK(std::llabs(to - from) < 10000000, "shard pattern {}: the range {{{}}} names more than 10 "
                 "million shards", pattern, inside);
    const bool padded = (a.size() > 1 && a[0] == '0') || (b.size() > 1 && b[0] == '0');
    const int width = padded ? static_cast<int>(std::max(a.size(), b.size())) : 0;
    std::vector<std::string> out;
    const int64_t step = from <= to ? 1 : -1;
    for (int64_t i = from;; i += step) {
      out.push_back(fmt::format("{:0{}d}", i, width));
      if (i == to) break;
    }
    return out;
  }
  if (inside.find(',') != std::string::npos) {
    std::vector<std::string> out;
    std::stringstream in(inside);
    for (std::string item; std::getline(in, item, ',');) out.push_back(item);
    if (!inside.empty() && inside.back() == ',') out.emplace_back();
    return out;
  }
  return {"{" + inside + "}"};
}

}  // namespace

std::vector<std::string> expand_braces(const std::string& pattern) {
  const size_t open = pattern.find('{');
  if (open == std::string::npos) return {pattern};
  const size_t close = pattern.find('}', open);
  STOKER_CHECK(close != std::string::npos, "shard pattern {}: a '{{' without its '}}'", pattern);
  STOKER_CHECK(pattern.find('{', open + 1) > close, "shard pattern {}: braces inside braces are not "
               "supported; write the pattern with one level of braces", pattern);
  const std::string head = pattern.substr(0, open);
  const std::vector<std::string> tails = expand_braces(pattern.substr(close + 1));
  std::vector<std::string> out;
  for (const std::string& alt : alternatives(pattern.substr(open + 1, close - open - 1), pattern)) {
    for (const std::string& tail : tails) out.push_back(head + alt + tail);
  }
  return out;
}

std::vector<std::string> expand_shard_list(const std::string& spec, const std::string& root) {
  std::vector<std::string> shards;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t end = spec.find("::", start);
    if (end == std::string::npos) end = spec.size();
    const std::string item = spec.substr(start, end - start);
    start = end + 2;
    if (item.empty()) continue;
    for (const std::string& path : expand_braces(item)) {
      fs::path p = path;
      if (p.is_relative() && !root.empty()) p = fs::path(root) / p;
      if (fs::is_directory(p)) {
        std::vector<std::string> found;
        for (const auto& entry : fs::directory_iterator(p)) {
          if (entry.is_regular_file() && entry.path().extension() == ".tar") found.push_back(entry.path().string());
        }
        STOKER_CHECK(!found.empty(), "shard folder {} holds no .tar files", p.string());
        std::sort(found.begin(), found.end());
        shards.insert(shards.end(), found.begin(), found.end());
      } else {
        STOKER_CHECK_FOUND(fs::is_regular_file(p), "shard {} (from '{}') does not exist; check the pattern and "
                     "data.root", p.string(), item);
        shards.push_back(p.string());
      }
    }
  }
  STOKER_CHECK(!shards.empty(), "the shard list '{}' names no shards", spec);
  return shards;
}

// ---- the index file ---------------------------------------------------------------------------------
// DALI's wds2idx v1.2 text: "v1.2 <samples>" then one line per sample of "<ext> <offset> <size>
// <name>" per member. The first line also carries "stoker-tar-index <shard bytes> <mtime ns>" after
// the count (DALI reads only the first two fields), which tells a current index from a stale one.

namespace {
constexpr const char* kStamp = "stoker-tar-index";

// A non-negative decimal number, or -1.
int64_t parse_number(const std::string& s) {
  if (s.empty() || s.size() > 18 || s.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoll(s);
}

bool has_space(const std::string& s) {
  return std::any_of(s.begin(), s.end(), [](unsigned char c) { return std::isspace(c) || c == 0; });
}
}  // namespace

std::string format_shard_index(const std::vector<WdsSample>& samples, int64_t shard_bytes, int64_t mtime_ns) {
  std::string out = fmt::format("v1.2 {} {} {} {}\n", samples.size(), kStamp, shard_bytes, mtime_ns);
  for (const WdsSample& s : samples) {
    for (size_t i = 0; i < s.members.size(); ++i) {
      const WdsMember& m = s.members[i];
      if (has_space(s.key) || has_space(m.ext)) return "";  // the format cannot hold it
      out += fmt::format("{}{} {} {} {}.{}", i == 0 ? "" : " ", m.ext, m.offset, m.size, s.key, m.ext);
    }
    out += '\n';
  }
  return out;
}

bool parse_shard_index(const std::string& text, int64_t shard_bytes, int64_t mtime_ns,
                       std::vector<WdsSample>& samples) {
  std::istringstream in(text);
  std::string line, version, stamp;
  int64_t count = 0, bytes = -1, mtime = -1;
  if (!std::getline(in, line)) return false;
  std::istringstream head(line);
  if (!(head >> version >> count >> stamp >> bytes >> mtime) || version != "v1.2" || stamp != kStamp ||
      bytes != shard_bytes || mtime != mtime_ns || count <= 0) {
    return false;
  }
  std::vector<WdsSample> parsed;
  std::string key, ext;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::vector<std::string> words;
    for (std::string w; fields >> w;) words.push_back(w);
    if (words.empty() || words.size() % 4 != 0) return false;
    WdsSample s;
    for (size_t i = 0; i < words.size(); i += 4) {
      const WdsMember m{words[i], parse_number(words[i + 1]), parse_number(words[i + 2])};
      if (!split_member_name(words[i + 3], key, ext) || ext != m.ext || m.offset < 512 || m.offset % 512 != 0 ||
          m.size < 0 || m.size > shard_bytes - m.offset || (!s.members.empty() && key != s.key)) {
        return false;
      }
      s.key = key;
      s.members.push_back(m);
    }
    parsed.push_back(std::move(s));
  }
  if (static_cast<int64_t>(parsed.size()) != count) return false;
  samples = std::move(parsed);
  return true;
}

namespace {

fs::path index_beside(const std::string& shard) {
  fs::path p = shard;
  if (p.extension() == ".tar") return p.replace_extension(".idx");
  return fs::path(shard + ".idx");
}

fs::path index_in_cache(const std::string& shard, const std::string& cache_dir) {
  fs::path dir = cache_dir;
  if (dir.empty()) {
    const char* cache = std::getenv("STOKER_CACHE");
    const char* home = std::getenv("HOME");
    dir = cache && *cache ? fs::path(cache) : fs::path(home && *home ? home : "/tmp") / ".cache" / "stoker";
    dir /= "wds-index";
  }
  // FNV-1a of the absolute path: one index per shard, whichever folder names it.
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char c : fs::absolute(shard).lexically_normal().string()) h = (h ^ c) * 1099511628211ull;
  return dir / fmt::format("{:016x}-{}", h, index_beside(shard).filename().string());
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

ShardIndex index_shard(const std::string& shard, const std::string& cache_dir) {
  struct stat st {};
  STOKER_CHECK(::stat(shard.c_str(), &st) == 0, "shard {} cannot be read ({})", shard, std::strerror(errno));
  const int64_t bytes = st.st_size;
  const int64_t mtime = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  const fs::path candidates[] = {index_beside(shard), index_in_cache(shard, cache_dir)};
  ShardIndex index;
  for (const fs::path& file : candidates) {
    if (fs::is_regular_file(file) && parse_shard_index(read_text(file), bytes, mtime, index.samples)) {
      index.index_file = file.string();
      index.from_cache = true;
      return index;
    }
  }
  index.samples = group_samples(scan_tar_file(shard), shard);
  STOKER_CHECK(!index.samples.empty(), "shard {} holds no samples (no member names a key and an extension, "
               "like 000123.jpg); is it a WebDataset shard?", shard);
  const std::string text = format_shard_index(index.samples, bytes, mtime);
  if (text.empty()) return index;  // a member name with white space: kept in memory only
  for (const fs::path& file : candidates) {
    try {
      if (file.has_parent_path()) fs::create_directories(file.parent_path());
      write_file_atomically(file, text);
      index.index_file = file.string();
      return index;
    } catch (const std::exception& e) {
      logger().debug("cannot cache the index of {} as {}: {}", shard, file.string(), e.what());
    }
  }
  return index;
}

}  // namespace stoker::data
