// The torch.save zip file of a dict of tensors (models/weights/torch_save.h): the pickler that writes
// what Python's torch.save writes for a plain dict, and the reading side around models/weights/pickle.h's
// unpickler: the zip archive, the byte order and the storage records.
#include "models/weights/torch_save.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/torch.h>

#include <climits>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>

#include "common/error.h"
#include "models/weights/pickle.h"

namespace stoker::models::weights {
namespace fs = std::filesystem;
namespace op = pickle::op;

namespace {

const std::map<std::string, at::ScalarType>& storage_types() {
  static const std::map<std::string, at::ScalarType> types{
      {"FloatStorage", at::kFloat}, {"DoubleStorage", at::kDouble},
      {"HalfStorage", at::kHalf},   {"BFloat16Storage", at::kBFloat16},
      {"LongStorage", at::kLong},   {"IntStorage", at::kInt},
      {"ShortStorage", at::kShort}, {"CharStorage", at::kChar},
      {"ByteStorage", at::kByte},   {"BoolStorage", at::kBool}};
  return types;
}

std::string storage_name(at::ScalarType type) {
  for (const auto& [name, t] : storage_types()) {
    if (t == type) return name;
  }
  STOKER_FAIL("cannot save a tensor of type {}: no torch storage type for it", c10::toString(type));
}

// ---------------------------------------------------------------------------------------------
// Writing

// Pickles {name: tensor} as Python's torch.save pickles a plain dict of tensors: protocol 2,
// each tensor a torch._utils._rebuild_tensor_v2 call on a persistent storage id whose bytes are
// the zip record data/<i>.
class Pickler {
 public:
  // The pickle; the tensors it refers to are storages(), in the order of their record keys.
  std::string pickle(const NamedTensors& state) {
    p_ += static_cast<char>(op::kProto);
    p_ += '\x02';
    p_ += static_cast<char>(op::kEmptyDict);
    p_ += static_cast<char>(op::kMark);
    for (const auto& [name, tensor] : state) {
      text(name);
      tensor_call(tensor.detach().to(at::kCPU).contiguous());
    }
    p_ += static_cast<char>(op::kSetItems);
    p_ += static_cast<char>(op::kStop);
    return p_;
  }
  const std::vector<at::Tensor>& storages() const { return storages_; }

 private:
  // _rebuild_tensor_v2(storage, offset 0, sizes, strides, requires_grad=False, OrderedDict()).
  void tensor_call(const at::Tensor& t) {
    const std::string key = std::to_string(storages_.size());
    storages_.push_back(t);
    global("torch._utils", "_rebuild_tensor_v2");
    p_ += static_cast<char>(op::kMark);
    // The persistent id ('storage', torch.<T>Storage, key, 'cpu', numel).
    p_ += static_cast<char>(op::kMark);
    text("storage");
    global("torch", storage_name(t.scalar_type()));
    text(key);
    text("cpu");
    integer(t.numel());
    p_ += static_cast<char>(op::kTuple);
    p_ += static_cast<char>(op::kBinPersId);
    integer(0);
    ints(t.sizes());
    ints(t.strides());
    p_ += static_cast<char>(op::kNewFalse);
    global("collections", "OrderedDict");  // the backward hooks: OrderedDict()
    p_ += static_cast<char>(op::kEmptyTuple);
    p_ += static_cast<char>(op::kReduce);
    p_ += static_cast<char>(op::kTuple);
    p_ += static_cast<char>(op::kReduce);
  }

  template <typename T>
  void raw(T v) {
    p_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void global(const std::string& module, const std::string& name) {
    p_ += static_cast<char>(op::kGlobal);
    p_ += module + "\n" + name + "\n";
  }
  void text(const std::string& s) {
    p_ += static_cast<char>(op::kBinUnicode);
    raw(static_cast<uint32_t>(s.size()));
    p_ += s;
  }
  void integer(int64_t v) {
    if (v >= 0 && v < 256) {
      p_ += static_cast<char>(op::kBinInt1);
      raw(static_cast<uint8_t>(v));
    } else if (v >= 0 && v < 65536) {
      p_ += static_cast<char>(op::kBinInt2);
      raw(static_cast<uint16_t>(v));
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      p_ += static_cast<char>(op::kBinInt);
      raw(static_cast<int32_t>(v));
    } else {
      p_ += static_cast<char>(op::kLong1);
      p_ += '\x08';
      raw(v);
    }
  }
  void ints(c10::IntArrayRef values) {
    p_ += static_cast<char>(op::kMark);
    for (int64_t v : values) integer(v);
    p_ += static_cast<char>(op::kTuple);
  }

  std::string p_;
  std::vector<at::Tensor> storages_;
};

// ---------------------------------------------------------------------------------------------
// Reading

[[noreturn]] void fail_to_read(const std::string& file, const std::string& what) {
  STOKER_FAIL(
      "cannot read {} as a torch.save file: {}; hint: save it in Python with "
      "torch.save(model.state_dict(), file) (the default zip format) or with save_state_dict",
      file, what);
}

// Reads the storages a pickle names from the zip records data/<key>, each once: tensors may share
// a storage.
class StorageRecords {
 public:
  StorageRecords(std::string name, caffe2::serialize::PyTorchStreamReader& zip)
      : name_(std::move(name)), zip_(zip) {}

  at::Tensor load(const std::string& storage_class, const std::string& key, int64_t numel) {
    if (auto found = storages_.find(key); found != storages_.end()) return found->second;
    const std::string type =
        storage_class.rfind("torch.", 0) == 0 ? storage_class.substr(6) : storage_class;
    auto it = storage_types().find(type);
    if (it == storage_types().end()) fail_to_read(name_, "unsupported storage type " + type);
    // The pickle's numel is checked against the record's size before anything is allocated: a
    // corrupt or hostile file must not make the reader allocate what it claims.
    const int64_t element = static_cast<int64_t>(c10::elementSize(it->second));
    if (numel < 0 || numel > INT64_MAX / element) {
      fail_to_read(name_, fmt::format("storage {} claims {} elements", key, numel));
    }
    const size_t nbytes = static_cast<size_t>(numel * element);
    const std::string record = "data/" + key;
    if (nbytes > 0) {
      if (!zip_.hasRecord(record)) fail_to_read(name_, "it lacks the record " + record);
      if (zip_.getRecordSize(record) != nbytes) {
        fail_to_read(name_, fmt::format("record {} holds {} bytes, not the {} its {} elements need",
                                        record, zip_.getRecordSize(record), nbytes, numel));
      }
    }
    at::Tensor flat = at::empty({numel}, at::TensorOptions().dtype(it->second));
    if (nbytes > 0) zip_.getRecord(record, flat.data_ptr(), nbytes);
    storages_.emplace(key, flat);
    return flat;
  }

 private:
  std::string name_;
  caffe2::serialize::PyTorchStreamReader& zip_;
  std::map<std::string, at::Tensor> storages_;
};

// Opens the zip, checks the byte order and runs the pickle in data.pkl.
c10::IValue unpickle_file(const std::string& name, std::istream& in, bool lenient) {
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> zip;
  try {
    zip = std::make_unique<caffe2::serialize::PyTorchStreamReader>(&in);
  } catch (const c10::Error& e) {
    fail_to_read(name, fmt::format("not a zip archive ({})", e.what_without_backtrace()));
  }
  auto [data, size] = zip->getRecord("data.pkl");
  if (zip->hasRecord("byteorder")) {
    auto [order, n] = zip->getRecord("byteorder");
    const std::string text(static_cast<const char*>(order.get()), n);
    if (text != "little") fail_to_read(name, "its tensors are stored " + text + "-endian");
  }
  StorageRecords records(name, *zip);
  const auto* begin = static_cast<const uint8_t*>(data.get());
  try {
    return pickle::unpickle(begin, begin + size,
                            [&](const std::string& storage_class, const std::string& key,
                                int64_t numel) { return records.load(storage_class, key, numel); },
                            lenient);
  } catch (const pickle::Error& e) {
    fail_to_read(name, e.what());
  }
}

}  // namespace

std::string torch_save_bytes(const NamedTensors& tensors) {
  Pickler pickler;
  const std::string pickle = pickler.pickle(tensors);
  std::string out;
  caffe2::serialize::PyTorchStreamWriter zip([&](const void* data, size_t size) {
    out.append(static_cast<const char*>(data), size);
    return size;
  });
  zip.writeRecord("data.pkl", pickle.data(), pickle.size());
  zip.writeRecord("byteorder", "little", 6);
  const std::vector<at::Tensor>& storages = pickler.storages();
  for (size_t i = 0; i < storages.size(); ++i) {
    const at::Tensor& t = storages[i];
    zip.writeRecord("data/" + std::to_string(i), t.data_ptr(), t.numel() * t.element_size());
  }
  zip.writeEndOfFile();
  return out;
}

c10::IValue read_torch_save(const fs::path& file, bool lenient) {
  const std::string name = file.string();
  STOKER_CHECK(fs::is_regular_file(file), "{} does not exist", name);
  std::ifstream in(file, std::ios::binary);
  STOKER_CHECK(in.is_open(), "cannot open {}", name);
  return read_torch_save(in, name, lenient);
}

c10::IValue read_torch_save(std::istream& in, const std::string& name, bool lenient) {
  try {
    return unpickle_file(name, in, lenient);
  } catch (const c10::Error& e) {  // from libtorch's zip reader or an IValue conversion
    fail_to_read(name, e.what_without_backtrace());
  }
}


}  // namespace stoker::models::weights
