// The fuzz targets' bodies (fuzz/fuzz_targets.h). A target that finds the parser's output
// inconsistent (an image whose size disagrees with its pixels, a tensor viewing memory outside its
// storage, a config that does not survive its own round trip) aborts with a message: libFuzzer
// then keeps the input as a crash.
#include "fuzz/fuzz_targets.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <ATen/core/Tensor.h>
#include <ATen/ops/zeros.h>

#include "common/error.h"
#include "data/dataset.h"
#include "data/decode.h"
#include "data/idx.h"
#include "data/tar.h"
#include "data/webdataset.h"
#include "models/weights/pickle.h"
#include "models/weights/torch_save.h"
#include "recipe/config.h"

namespace stoker::fuzz {
namespace fs = std::filesystem;
namespace {

void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz target invariant broken: %s\n", what);
  std::abort();
}

// A folder of this process's own for the parsers that read files; removed at exit.
class ScratchDir {
 public:
  ScratchDir() : path_(fs::temp_directory_path() / ("stoker-fuzz-" + std::to_string(getpid()))) {
    fs::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  fs::path write(const std::string& name, const uint8_t* data, size_t size) const {
    const fs::path file = path_ / name;
    fs::create_directories(file.parent_path());
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    require(out.good(), "cannot write the fuzz input to a scratch file");
    return file;
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

const ScratchDir& scratch() {
  static const ScratchDir dir;
  return dir;
}

// Pixels of the size the image says it has.
void require_consistent(const data::Image& image) {
  require(image.height > 0 && image.width > 0 && (image.channels == 1 || image.channels == 3),
          "a decoded image has an empty size or a wrong channel count");
  require(image.pixels.size() == static_cast<size_t>(image.height * image.width * image.channels),
          "a decoded image's pixel buffer does not match its size");
}

// Decodes with `options`; a stoker::Error is a refused image, anything else escapes.
void try_decode(const uint8_t* data, size_t size, const data::DecodeOptions& options) {
  data::Image out;
  try {
    data::decode_image(data, size, options, out, "fuzz-input");
  } catch (const Error&) {
    require(out.height == 0 && out.width == 0 && out.channels == 0,
            "a failed decode left a size in its output");
    return;
  }
  require_consistent(out);
}

// A tensor that reads only inside its storage, and whose elements can be read.
void require_in_bounds(const at::Tensor& t) {
  if (t.numel() == 0) return;
  int64_t last = t.storage_offset();
  for (int64_t d = 0; d < t.dim(); ++d) {
    require(t.stride(d) >= 0, "a loaded tensor has a negative stride");
    last += (t.size(d) - 1) * t.stride(d);
  }
  require(t.storage_offset() >= 0 &&
              (last + 1) * static_cast<int64_t>(t.element_size()) <=
                  static_cast<int64_t>(t.storage().nbytes()),
          "a loaded tensor views memory outside its storage");
  (void)t.sum();
}

// The top level of what a state-dict reader returns: every tensor value in bounds.
void require_tensors_in_bounds(const c10::IValue& value) {
  if (value.isTensor()) require_in_bounds(value.toTensor());
  if (!value.isGenericDict()) return;
  for (const auto& entry : value.toGenericDict()) {
    if (entry.value().isTensor()) require_in_bounds(entry.value().toTensor());
  }
}

}  // namespace

void image(const uint8_t* data, size_t size) {
  constexpr int64_t kMaxPixels = int64_t(1) << 22;  // keeps one input's decode in milliseconds
  data::ImageInfo info;
  try {
    info = data::probe_image(data, size, "fuzz-input", kMaxPixels);
  } catch (const Error&) {
    return;
  }
  require(info.width > 0 && info.height > 0 && info.width * info.height <= kMaxPixels,
          "probe_image returned a size outside its limits");
  const uint8_t pick = data[size - 1];
  data::DecodeOptions options;
  options.max_pixels = kMaxPixels;
  options.channels = (pick & 1) ? 1 : 3;
  try_decode(data, size, options);
  // A region in the image's middle, at a reduced JPEG scale when the pick says so.
  options.region.x = info.width * ((pick >> 1) & 3) / 8;
  options.region.y = info.height * ((pick >> 3) & 3) / 8;
  options.region.width = std::max<int64_t>(1, info.width / 2);
  options.region.height = std::max<int64_t>(1, info.height / 2);
  options.min_width = (pick & 0x20) ? options.region.width / 5 : 0;
  options.min_height = (pick & 0x40) ? options.region.height / 3 : 0;
  try_decode(data, size, options);
}

void idx(const uint8_t* data, size_t size) {
  const fs::path file = scratch().write("images-idx3-ubyte", data, size);
  try {
    const torch::Tensor t = data::read_idx(file);
    require(t.dim() >= 1 && t.dim() <= 4 && t.numel() > 0, "read_idx returned an impossible shape");
  } catch (const Error&) {
  }
}

void cifar(const uint8_t* data, size_t size) {
  for (const int64_t classes : {10, 100}) {
    const std::string folder = classes == 10 ? "cifar10" : "cifar100";
    scratch().write(folder + (classes == 10 ? "/test_batch.bin" : "/test.bin"), data, size);
    data::DatasetOptions options;
    options.type = folder;
    options.root = (scratch().path() / folder).string();
    options.split = "test";
    options.num_classes = classes;
    try {
      const auto set = data::load_cifar_dataset(options, classes);
      require(set->size() > 0, "a CIFAR file without records loaded");
      data::RawSample sample;
      set->read(set->size() - 1, sample);
      require(sample.label >= 0 && sample.label < classes, "a CIFAR label out of range loaded");
      require_consistent(sample.image);
    } catch (const Error&) {
    }
  }
}

void tar(const uint8_t* data, size_t size) {
  std::vector<data::TarMember> members;
  try {
    members = data::scan_tar(data, size, "fuzz-input.tar");
  } catch (const Error&) {
    return;
  }
  for (const auto& m : members) {
    require(m.offset >= 512 && m.offset % 512 == 0 && m.size >= 0 &&
                m.size <= static_cast<int64_t>(size) - m.offset,
            "a tar member's payload lies outside the archive");
  }
  std::vector<data::WdsSample> samples;
  try {
    samples = data::group_samples(members, "fuzz-input.tar");
  } catch (const Error&) {
    return;
  }
  // The cached index reads back as what was written (or is not written at all).
  const std::string text = data::format_shard_index(samples, static_cast<int64_t>(size), 1);
  if (text.empty() || samples.empty()) return;
  std::vector<data::WdsSample> again;
  require(data::parse_shard_index(text, static_cast<int64_t>(size), 1, again),
          "the index of a scanned archive does not parse back");
  require(again.size() == samples.size(), "the index parses back to another number of samples");
  for (size_t i = 0; i < samples.size(); ++i) {
    require(again[i].key == samples[i].key && again[i].members.size() == samples[i].members.size(),
            "the index parses back to other samples");
  }
}

void pickle(const uint8_t* data, size_t size) {
  const models::weights::pickle::StorageLoader zeros = [](const std::string&, const std::string&,
                                                 int64_t numel) {
    if (numel < 0 || numel > (1 << 16)) throw models::weights::pickle::Error("storage size out of range");
    return at::zeros({numel});
  };
  // Strict, and lenient as model.pretrained reads training checkpoints (unknown objects kept as placeholders).
  for (const bool lenient : {false, true}) {
    c10::IValue value;
    try {
      value = models::weights::pickle::unpickle(data, data + size, zeros, lenient);
    } catch (const models::weights::pickle::Error&) {
      continue;
    }
    require_tensors_in_bounds(value);
  }
}

void torch_save(const uint8_t* data, size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  c10::IValue value;
  try {
    value = models::weights::read_torch_save(in, "fuzz-input.pt");
  } catch (const Error&) {
    return;
  }
  require_tensors_in_bounds(value);
}

void config(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> overrides;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("#set ", 0) == 0) overrides.push_back(line.substr(5));
  }
  std::string yaml;
  std::vector<std::string> notes;  // kept, not logged
  try {
    yaml = config_to_yaml(parse_config(text, "fuzz-input.yaml", overrides, &notes));
  } catch (const Error&) {
    return;
  }
  // What Stoker wrote it must read back: a resumed run parses the config its checkpoint saved.
  std::string again;
  try {
    again = config_to_yaml(parse_config(yaml, "round-trip.yaml"));
  } catch (const Error& e) {
    std::fprintf(stderr, "the resolved config does not parse back: %s\n--- config:\n%s\n", e.what(),
                 yaml.c_str());
    require(false, "config_to_yaml's output does not parse back");
  }
  require(again == yaml, "config_to_yaml(parse_config(config_to_yaml(c))) differs from config_to_yaml(c)");
}

const std::vector<Target>& targets() {
  static const std::vector<Target> all = {{"image", image},           {"idx", idx},
                                          {"cifar", cifar},           {"tar", tar},
                                          {"pickle", pickle},
                                          {"torch_save", torch_save}, {"config", config}};
  return all;
}

}  // namespace stoker::fuzz
