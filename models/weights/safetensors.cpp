// Reading and writing safetensors files (models/weights/safetensors.h).
#include "models/weights/safetensors.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "common/error.h"

namespace stoker::models::weights {
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

constexpr uint64_t kMaxHeader = 100'000'000;  // the specification's limit on the header's length

// The format's dtype names and torch's types (F8_* and the unsigned wider types: as torch has them).
const std::vector<std::pair<std::string, c10::ScalarType>>& dtypes() {
  static const std::vector<std::pair<std::string, c10::ScalarType>> table = {
      {"F64", torch::kFloat64},      {"F32", torch::kFloat32},       {"F16", torch::kFloat16},
      {"BF16", torch::kBFloat16},    {"I64", torch::kInt64},         {"I32", torch::kInt32},
      {"I16", torch::kInt16},        {"I8", torch::kInt8},           {"U8", torch::kUInt8},
      {"BOOL", torch::kBool},        {"U16", torch::kUInt16},        {"U32", torch::kUInt32},
      {"U64", torch::kUInt64},       {"F8_E4M3", torch::kFloat8_e4m3fn}, {"F8_E5M2", torch::kFloat8_e5m2},
      {"C64", torch::kComplexFloat},
  };
  return table;
}

c10::ScalarType dtype_of(const std::string& name, const std::string& file, const std::string& key) {
  for (const auto& [n, t] : dtypes()) {
    if (n == name) return t;
  }
  STOKER_FAIL("safetensors file {}: tensor '{}' has dtype \"{}\", which Stoker does not read", file, key, name);
}

std::string name_of(c10::ScalarType type) {
  for (const auto& [n, t] : dtypes()) {
    if (t == type) return n;
  }
  STOKER_FAIL("safetensors: cannot write a tensor of dtype {}", c10::toString(type));
}

static_assert(sizeof(uint64_t) == 8);

bool little_endian_host() {
  const uint16_t one = 1;
  unsigned char first;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

struct Entry {
  std::string key;
  c10::ScalarType dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;
};

// One header entry, checked: dtype, shape, offsets, and that the byte range fits the shape.
Entry parse_entry(const std::string& key, const json& value, const std::string& file) {
  const auto bad = [&](const std::string& what) {
    STOKER_FAIL("safetensors file {}: the header's entry for '{}' {}; the file is damaged or not safetensors", file,
                key, what);
  };
  if (!value.is_object()) bad("is not an object");
  if (!value.contains("dtype") || !value["dtype"].is_string()) bad("has no dtype");
  if (!value.contains("shape") || !value["shape"].is_array()) bad("has no shape");
  if (!value.contains("data_offsets") || !value["data_offsets"].is_array() || value["data_offsets"].size() != 2) {
    bad("has no data_offsets [begin, end]");
  }
  Entry e{key, dtype_of(value["dtype"].get<std::string>(), file, key), {}, 0, 0};
  uint64_t numel = 1;
  for (const json& d : value["shape"]) {
    if (!d.is_number_unsigned()) bad("has a shape that is not a list of sizes");
    const uint64_t n = d.get<uint64_t>();
    if (n > 0 && numel > std::numeric_limits<uint64_t>::max() / n / 16) bad("has a shape too large");
    numel *= n;
    e.shape.push_back(static_cast<int64_t>(n));
  }
  for (const json& o : value["data_offsets"]) {
    if (!o.is_number_unsigned()) bad("has data_offsets that are not byte offsets");
  }
  e.begin = value["data_offsets"][0].get<uint64_t>();
  e.end = value["data_offsets"][1].get<uint64_t>();
  const uint64_t bytes = numel * c10::elementSize(e.dtype);
  if (e.end < e.begin || e.end - e.begin != bytes) {
    bad(fmt::format("has data_offsets [{}, {}] ({} bytes), but its shape and dtype take {} bytes", e.begin, e.end,
                    e.end - e.begin, bytes));
  }
  return e;
}

// The header: its length, its JSON and its entries, checked against the file's length.
std::vector<Entry> read_header(std::ifstream& in, const std::string& file, uint64_t file_size, uint64_t& data_start) {
  unsigned char length_bytes[8];
  if (file_size < 8 || !in.read(reinterpret_cast<char*>(length_bytes), 8)) {
    STOKER_FAIL("safetensors file {} is {} bytes long, too short for the 8-byte header length: truncated", file,
                file_size);
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | length_bytes[i];
  STOKER_CHECK(n <= kMaxHeader && n <= file_size - 8,
               "safetensors file {}: its header length says {} bytes, but the file has {} after it{}; it is truncated "
               "or not safetensors",
               file, n, file_size - 8, n > kMaxHeader ? " (and the format allows 100 MB)" : "");
  std::string text(static_cast<size_t>(n), '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  json header;
  try {
    header = json::parse(text);
  } catch (const json::exception& e) {
    STOKER_FAIL("safetensors file {}: its header is not valid JSON ({}); the file is damaged or not safetensors", file,
                e.what());
  }
  STOKER_CHECK(header.is_object(), "safetensors file {}: its header is not a JSON object", file);
  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key != "__metadata__") entries.push_back(parse_entry(key, value, file));
  }
  data_start = 8 + n;
  // The tensors must tile the data exactly: no overlaps, no gaps, nothing past the file's end.
  std::vector<const Entry*> by_offset;
  for (const Entry& e : entries) by_offset.push_back(&e);
  // Empty tensors (begin == end) sort before a tensor starting where they do.
  std::sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t expected = 0;
  for (const Entry* e : by_offset) {
    STOKER_CHECK(e->begin == expected,
                 "safetensors file {}: tensor '{}' starts at byte {} of the data, where {} was expected (tensors "
                 "overlap or leave gaps); the file is damaged",
                 file, e->key, e->begin, expected);
    expected = e->end;
  }
  STOKER_CHECK(data_start + expected == file_size,
               "safetensors file {} is {} bytes, but its header describes {}: it is {}", file, file_size,
               data_start + expected, data_start + expected > file_size ? "truncated" : "followed by extra bytes");
  return entries;
}

}  // namespace

NamedTensors read_safetensors(const fs::path& path) {
  const std::string file = path.string();
  STOKER_CHECK(little_endian_host(), "safetensors: reading on a big-endian machine is not supported");
  std::error_code ec;
  STOKER_CHECK(fs::is_regular_file(path, ec), "safetensors file {} does not exist", file);
  const uint64_t size = fs::file_size(path, ec);
  std::ifstream in(path, std::ios::binary);
  STOKER_CHECK(in && !ec, "cannot open safetensors file {}", file);
  uint64_t data_start = 0;
  const std::vector<Entry> entries = read_header(in, file, size, data_start);
  NamedTensors out;
  for (const Entry& e : entries) {
    torch::Tensor t = torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype));
    in.seekg(static_cast<std::streamoff>(data_start + e.begin));
    in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(e.end - e.begin));
    STOKER_CHECK(in.good() || e.end == e.begin, "safetensors file {}: cannot read tensor '{}' (truncated?)", file,
                 e.key);
    out.emplace_back(e.key, std::move(t));
  }
  return out;
}

std::string safetensors_bytes(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata) {
  STOKER_CHECK(little_endian_host(), "safetensors: writing on a big-endian machine is not supported");
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> data;
  uint64_t offset = 0;
  for (const auto& [key, tensor] : tensors) {
    torch::Tensor t = tensor.detach().to(torch::kCPU).contiguous();
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    header[key] = {{"dtype", name_of(t.scalar_type())}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(std::move(t));
  }
  std::string text = header.dump();
  // The specification pads the header with spaces to a multiple of 8, so that the data is aligned.
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += text;
  for (const torch::Tensor& t : data) out.append(static_cast<const char*>(t.data_ptr()), t.numel() * t.element_size());
  return out;
}

}  // namespace stoker::models::weights
