// What a file holds, from its first bytes (models/weights/file_kind.h).
#include "models/weights/file_kind.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <fstream>

#include <caffe2/serialize/inline_container.h>
#include <fmt/format.h>

namespace stoker::models::weights {
namespace fs = std::filesystem;

namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// The first line of a text file, shortened, for "it starts with ...".
std::string first_line(const std::string& head) {
  std::string line = head.substr(0, head.find('\n'));
  if (line.size() > 40) line = line.substr(0, 40) + "...";
  return line;
}

bool looks_like_text(const std::string& head) {
  return std::all_of(head.begin(), head.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u >= 0x80 || std::isprint(u) || std::isspace(u);
  });
}

// A zip archive: torch.save's (data.pkl), TorchScript's (data.pkl and code/), or another.
FileDescription describe_zip(const fs::path& file) {
  try {
    caffe2::serialize::PyTorchStreamReader zip(file.string());
    bool code = false;
    for (const std::string& record : zip.getAllRecords()) {
      code = code || record.rfind("code/", 0) == 0 || record == "constants.pkl";
    }
    if (code) return {FileKind::kTorchScript, "a TorchScript archive (torch.jit.save, or a Stoker checkpoint)"};
    if (zip.hasRecord("data.pkl")) return {FileKind::kZip, "a torch.save file"};
    return {FileKind::kOtherZip, "a zip archive that torch did not write (no data.pkl)"};
  } catch (const std::exception& e) {
    std::string why = e.what();
    why = why.substr(0, why.find('\n'));
    return {FileKind::kOtherZip, fmt::format("a damaged or truncated zip archive ({})", why)};
  }
}

}  // namespace

FileDescription describe_file(const fs::path& file) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) {
    return {FileKind::kMissing, fs::exists(file, ec) ? "not a regular file" : "missing (no such file)"};
  }
  const auto size = fs::file_size(file, ec);
  if (ec || size == 0) return {FileKind::kEmpty, "empty (0 bytes)"};
  std::ifstream in(file, std::ios::binary);
  std::string head(static_cast<size_t>(std::min<uintmax_t>(size, 512)), '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  if (starts_with(head, "PK\x03\x04") || starts_with(head, "PK\x05\x06")) return describe_zip(file);
  if (head.size() >= 9 && head[8] == '{') {
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(head[static_cast<size_t>(i)]);
    if (n > 1 && n <= size - 8) return {FileKind::kSafetensors, "a safetensors file"};
  }
  if (head.size() >= 2 && static_cast<unsigned char>(head[0]) == 0x80 && static_cast<unsigned char>(head[1]) <= 5) {
    return {FileKind::kLegacyTorch, "a Python pickle (torch.save's format before PyTorch 1.6, or pickle.dump)"};
  }
  if (starts_with(head, "\xff\xd8\xff")) return {FileKind::kOther, "a JPEG image"};
  if (starts_with(head, "\x89PNG")) return {FileKind::kOther, "a PNG image"};
  if (starts_with(head, "\x1f\x8b")) return {FileKind::kOther, "a gzip file"};
  if (head.size() >= 262 && head.compare(257, 5, "ustar") == 0) return {FileKind::kOther, "a tar archive"};
  if (starts_with(head, "\x93NUMPY")) return {FileKind::kOther, "a NumPy array (.npy)"};
  if (starts_with(head, "\x89HDF")) return {FileKind::kOther, "an HDF5 file (Keras or TensorFlow weights?)"};
  if (file.extension() == ".onnx") return {FileKind::kOther, "an ONNX model (a protobuf)"};
  if (looks_like_text(head)) {
    return {FileKind::kOther, fmt::format("a text file (it starts with \"{}\")", first_line(head))};
  }
  return {FileKind::kOther, fmt::format("a file of {} bytes in no format Stoker knows", size)};
}

}  // namespace stoker::models::weights
