#include "models/resnet.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/torch.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <utility>

#include "common/atomic_write.h"
#include "common/error.h"

namespace stoker::models {
namespace nn = torch::nn;
namespace fs = std::filesystem;

namespace {

nn::Conv2d conv3x3(int64_t in, int64_t out, int64_t stride) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}

nn::Conv2d conv1x1(int64_t in, int64_t out, int64_t stride) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false));
}

std::string shape_text(c10::IntArrayRef sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + "]";
}

// Every parameter and buffer of `model` under its dotted name, in torch's state_dict() order
// (module by module: its own parameters, then its own buffers).
std::vector<std::pair<std::string, torch::Tensor>> state_of(nn::Module& model) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : model.named_modules("", /*include_self=*/true)) {
    const std::string prefix = item.key().empty() ? "" : item.key() + ".";
    for (const auto& p : item.value()->named_parameters(/*recurse=*/false)) {
      out.emplace_back(prefix + p.key(), p.value());
    }
    for (const auto& b : item.value()->named_buffers(/*recurse=*/false)) {
      out.emplace_back(prefix + b.key(), b.value());
    }
  }
  return out;
}

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

// Pickles {name: tensor} exactly as Python's torch.save pickles a plain dict of tensors (protocol
// 2, storages as zip records data/<i>), so that Python reads it with plain torch.load(file), i.e.
// weights_only=True. torch::pickle_save is not used: it tags the dict with a
// torch.jit._pickle.restore_type_tag call, which torch.load refuses unless weights_only=False.
class StateDictWriter {
 public:
  std::vector<char> write(const std::vector<std::pair<std::string, at::Tensor>>& state) {
    std::vector<char> out;
    caffe2::serialize::PyTorchStreamWriter zip([&](const void* data, size_t size) {
      const char* bytes = static_cast<const char*>(data);
      out.insert(out.end(), bytes, bytes + size);
      return size;
    });
    std::vector<at::Tensor> storages;
    p_ += "\x80\x02}(";  // PROTO 2, EMPTY_DICT, MARK
    for (const auto& [name, tensor] : state) {
      const at::Tensor t = tensor.detach().to(at::kCPU).contiguous();
      const std::string key = std::to_string(storages.size());
      storages.push_back(t);
      text(name);
      p_ += "ctorch._utils\n_rebuild_tensor_v2\n(";
      p_ += "(";  // the persistent id ('storage', torch.<T>Storage, key, 'cpu', numel)
      text("storage");
      p_ += "ctorch\n" + storage_name(t.scalar_type()) + "\n";
      text(key);
      text("cpu");
      integer(t.numel());
      p_ += "tQ";  // TUPLE, BINPERSID
      integer(0);  // storage offset
      ints(t.sizes());
      ints(t.strides());
      p_ += "\x89";                           // requires_grad=False
      p_ += "ccollections\nOrderedDict\n)R";  // backward hooks: OrderedDict()
      p_ += "tR";                             // TUPLE, REDUCE
    }
    p_ += "u.";  // SETITEMS, STOP
    zip.writeRecord("data.pkl", p_.data(), p_.size());
    zip.writeRecord("byteorder", "little", 6);
    for (size_t i = 0; i < storages.size(); ++i) {
      const at::Tensor& t = storages[i];
      zip.writeRecord("data/" + std::to_string(i), t.data_ptr(), t.numel() * t.element_size());
    }
    zip.writeEndOfFile();
    return out;
  }

 private:
  template <typename T>
  void raw(T v) {
    p_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void text(const std::string& s) {
    p_ += 'X';
    raw(static_cast<uint32_t>(s.size()));
    p_ += s;
  }
  void integer(int64_t v) {
    if (v >= 0 && v < 256) {
      p_ += 'K';
      raw(static_cast<uint8_t>(v));
    } else if (v >= 0 && v < 65536) {
      p_ += 'M';
      raw(static_cast<uint16_t>(v));
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      p_ += 'J';
      raw(static_cast<int32_t>(v));
    } else {
      p_ += "\x8a\x08";
      raw(v);
    }
  }
  void ints(c10::IntArrayRef values) {
    p_ += '(';
    for (int64_t v : values) integer(v);
    p_ += 't';
  }

  std::string p_;
};

// Reads the {name: tensor} dict of a torch.save zip file. libtorch's own torch::pickle_load cannot:
// Python's state_dict() is a collections.OrderedDict, which its unpickler turns into None. This is
// the small subset of the pickle machine that torch.save (Python) and torch::pickle_save (C++)
// emit for a dict or OrderedDict of tensors: containers, numbers, strings, and the globals
// collections.OrderedDict, torch.*Storage, torch._utils._rebuild_tensor_v2 / _rebuild_parameter
// and torch.jit._pickle.restore_type_tag.
class StateDictReader {
 public:
  // `in` is the file, open in binary mode; it must outlive the reader.
  StateDictReader(std::string name, std::istream& in) : name_(std::move(name)), in_(in) {}

  c10::IValue read() {
    try {
      zip_ = std::make_unique<caffe2::serialize::PyTorchStreamReader>(&in_);
    } catch (const c10::Error& e) {
      fail(fmt::format("not a zip archive ({})", e.what_without_backtrace()));
    }
    auto [data, size] = zip_->getRecord("data.pkl");
    pickle_ = static_cast<const uint8_t*>(data.get());
    end_ = pickle_ + size;
    pos_ = pickle_;
    data_ = std::move(data);
    if (zip_->hasRecord("byteorder")) {
      auto [order, n] = zip_->getRecord("byteorder");
      const std::string text(static_cast<const char*>(order.get()), n);
      if (text != "little") fail("its tensors are stored " + text + "-endian");
    }
    return run();
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    STOKER_FAIL(
        "cannot read {} as a torch.save file: {}; hint: save it in Python with "
        "torch.save(model.state_dict(), file) (the default zip format) or with "
        "save_state_dict",
        name_, what);
  }

  template <typename T>
  T take() {
    if (end_ - pos_ < static_cast<std::ptrdiff_t>(sizeof(T))) fail("its pickle is truncated");
    T v;
    std::memcpy(&v, pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string take_bytes(size_t n) {
    if (static_cast<size_t>(end_ - pos_) < n) fail("its pickle is truncated");
    std::string s(reinterpret_cast<const char*>(pos_), n);
    pos_ += n;
    return s;
  }
  std::string take_line() {
    const uint8_t* nl = static_cast<const uint8_t*>(std::memchr(pos_, '\n', end_ - pos_));
    if (nl == nullptr) fail("its pickle is truncated");
    std::string s(reinterpret_cast<const char*>(pos_), nl - pos_);
    pos_ = nl + 1;
    return s;
  }

  c10::IValue pop() {
    if (stack_.empty()) fail("its pickle is malformed (empty stack)");
    c10::IValue v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  std::vector<c10::IValue> pop_to_mark() {
    if (marks_.empty()) fail("its pickle is malformed (no mark)");
    const size_t start = marks_.back();
    marks_.pop_back();
    std::vector<c10::IValue> items(std::make_move_iterator(stack_.begin() + start),
                                   std::make_move_iterator(stack_.end()));
    stack_.resize(start);
    return items;
  }
  c10::IValue& top() {
    if (stack_.empty()) fail("its pickle is malformed (empty stack)");
    return stack_.back();
  }

  // Globals are kept on the stack as strings "\x01module.name".
  static bool is_global(const c10::IValue& v, const char* name) {
    return v.isString() && v.toStringRef() == std::string("\x01") + name;
  }

  c10::IValue storage(const c10::IValue& pid) {
    if (!pid.isTuple()) fail("unsupported persistent id");
    const auto& elements = pid.toTupleRef().elements();
    const std::vector<c10::IValue> e(elements.begin(), elements.end());
    if (e.size() != 5 || !e[0].isString() || e[0].toStringRef() != "storage" || !e[1].isString() ||
        !e[2].isString() || !e[3].isString() || !e[4].isInt()) {
      fail("unsupported persistent id");
    }
    const auto& types = storage_types();
    const std::string type = e[1].toStringRef().substr(1);  // "\x01torch.FloatStorage"
    auto it = types.find(type.rfind("torch.", 0) == 0 ? type.substr(6) : type);
    if (it == types.end()) fail("unsupported storage type " + type);
    const std::string key = e[2].toStringRef();
    auto found = storages_.find(key);
    if (found != storages_.end()) return found->second;
    at::Tensor flat = at::empty({e[4].toInt()}, at::TensorOptions().dtype(it->second));
    const size_t nbytes = flat.numel() * flat.element_size();
    if (nbytes > 0) {
      const std::string record = "data/" + key;
      if (!zip_->hasRecord(record)) fail("it lacks the record " + record);
      if (zip_->getRecordSize(record) != nbytes) fail("record " + record + " has the wrong size");
      zip_->getRecord(record, flat.data_ptr(), nbytes);
    }
    storages_.emplace(key, flat);
    return flat;
  }

  static std::vector<int64_t> ints(const c10::IValue& v) {
    std::vector<int64_t> out;
    for (const auto& e : v.toTupleRef().elements()) out.push_back(e.toInt());
    return out;
  }

  c10::IValue reduce(const c10::IValue& callable, const c10::IValue& args) {
    if (!args.isTuple()) fail("its pickle is malformed (REDUCE without a tuple)");
    const auto& a = args.toTupleRef().elements();
    if (is_global(callable, "collections.OrderedDict")) {
      return c10::impl::GenericDict(c10::AnyType::get(), c10::AnyType::get());
    }
    if (is_global(callable, "torch._utils._rebuild_tensor_v2") && a.size() >= 4 &&
        a[0].isTensor() && a[1].isInt() && a[2].isTuple() && a[3].isTuple()) {
      return a[0].toTensor().as_strided(ints(a[2]), ints(a[3]), a[1].toInt());
    }
    if (is_global(callable, "torch._utils._rebuild_parameter") && !a.empty() && a[0].isTensor()) {
      return a[0];
    }
    if (is_global(callable, "torch.jit._pickle.restore_type_tag") && !a.empty()) {
      return a[0];  // torch::pickle_save's type annotation of a container
    }
    fail("it calls " + (callable.isString() ? callable.toStringRef().substr(1) : "something") +
         ", which a state dict of tensors does not");
  }

  c10::IValue run() {
    std::map<uint32_t, c10::IValue> memo;
    while (true) {
      const uint8_t op = take<uint8_t>();
      switch (op) {
        case 0x80:
          take<uint8_t>();
          break;  // PROTO
        case 0x95:
          take<uint64_t>();
          break;  // FRAME
        case '.':
          return pop();  // STOP
        case '(':
          marks_.push_back(stack_.size());
          break;  // MARK
        case ')':
          stack_.emplace_back(c10::ivalue::Tuple::create({}));
          break;
        case 't':
          stack_.emplace_back(c10::ivalue::Tuple::create(pop_to_mark()));
          break;
        case 0x85:
        case 0x86:
        case 0x87: {  // TUPLE1..3
          const size_t n = op - 0x84;
          if (stack_.size() < n) fail("its pickle is malformed (short tuple)");
          std::vector<c10::IValue> items(stack_.end() - n, stack_.end());
          stack_.resize(stack_.size() - n);
          stack_.emplace_back(c10::ivalue::Tuple::create(std::move(items)));
        } break;
        case '}':
          stack_.emplace_back(c10::impl::GenericDict(c10::AnyType::get(), c10::AnyType::get()));
          break;
        case ']':
          stack_.emplace_back(c10::impl::GenericList(c10::AnyType::get()));
          break;
        case 'a': {
          c10::IValue v = pop();
          if (!top().isList()) fail("APPEND to a non-list");
          top().toList().push_back(v);
        } break;
        case 'e': {
          auto items = pop_to_mark();
          if (!top().isList()) fail("APPENDS to a non-list");
          for (auto& v : items) top().toList().push_back(v);
        } break;
        case 's': {  // SETITEM
          c10::IValue v = pop(), k = pop();
          if (!top().isGenericDict()) fail("SETITEM on a non-dict");
          top().toGenericDict().insert_or_assign(k, v);
        } break;
        case 'u': {  // SETITEMS
          auto items = pop_to_mark();
          if (!top().isGenericDict() || items.size() % 2) fail("SETITEMS on a non-dict");
          auto dict = top().toGenericDict();
          for (size_t i = 0; i < items.size(); i += 2)
            dict.insert_or_assign(items[i], items[i + 1]);
        } break;
        case 'c': {  // GLOBAL
          std::string module = take_line();
          std::string name = take_line();
          stack_.emplace_back("\x01" + module + "." + name);
        } break;
        case 'R': {
          c10::IValue args = pop(), callable = pop();
          stack_.push_back(reduce(callable, args));
        } break;
        case 'b': {  // BUILD: only an OrderedDict's _metadata
          pop();
          if (!top().isGenericDict()) fail("it builds an object other than a dict");
        } break;
        case 'Q':
          stack_.push_back(storage(pop()));
          break;  // BINPERSID
        case 'q':
          memo[take<uint8_t>()] = top();
          break;  // BINPUT
        case 'r':
          memo[take<uint32_t>()] = top();
          break;  // LONG_BINPUT
        case 0x94:
          memo[static_cast<uint32_t>(memo.size())] = top();
          break;  // MEMOIZE
        case 'h':
        case 'j': {  // BINGET, LONG_BINGET
          const uint32_t i = op == 'h' ? take<uint8_t>() : take<uint32_t>();
          auto it = memo.find(i);
          if (it == memo.end()) fail("its pickle is malformed (bad memo reference)");
          stack_.push_back(it->second);
        } break;
        case 'K':
          stack_.emplace_back(static_cast<int64_t>(take<uint8_t>()));
          break;
        case 'M':
          stack_.emplace_back(static_cast<int64_t>(take<uint16_t>()));
          break;
        case 'J':
          stack_.emplace_back(static_cast<int64_t>(take<int32_t>()));
          break;
        case 0x8a: {  // LONG1
          const uint8_t n = take<uint8_t>();
          if (n > 8) fail("it holds an integer too large");
          const std::string b = take_bytes(n);
          int64_t v = 0;
          for (size_t i = 0; i < n; ++i)
            v |= static_cast<int64_t>(static_cast<uint8_t>(b[i])) << (8 * i);
          if (n > 0 && n < 8 && (static_cast<uint8_t>(b[n - 1]) & 0x80)) v -= int64_t(1) << (8 * n);
          stack_.emplace_back(v);
        } break;
        case 'G': {  // BINFLOAT, big-endian
          uint64_t bits = 0;
          for (int i = 0; i < 8; ++i) bits = (bits << 8) | take<uint8_t>();
          double d;
          std::memcpy(&d, &bits, 8);
          stack_.emplace_back(d);
        } break;
        case 'X': {
          const uint32_t n = take<uint32_t>();
          stack_.emplace_back(take_bytes(n));
        } break;
        case 0x8c: {
          const uint8_t n = take<uint8_t>();
          stack_.emplace_back(take_bytes(n));
        } break;
        case 'N':
          stack_.emplace_back();
          break;
        case 0x88:
          stack_.emplace_back(true);
          break;
        case 0x89:
          stack_.emplace_back(false);
          break;
        default:
          fail(fmt::format("its pickle uses opcode 0x{:02x}, which a state dict does not", op));
      }
    }
  }

  std::string name_;
  std::istream& in_;
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> zip_;
  at::DataPtr data_;
  const uint8_t* pickle_ = nullptr;
  const uint8_t* end_ = nullptr;
  const uint8_t* pos_ = nullptr;
  std::vector<c10::IValue> stack_;
  std::vector<size_t> marks_;
  std::map<std::string, at::Tensor> storages_;
};

constexpr const char* kLoadHint =
    "hint: the file must come from the same architecture with the same num_classes and "
    "in_channels (Python: torch.save(model.state_dict(), file); Stoker: save_state_dict)";

}  // namespace

// ---------------------------------------------------------------------------------------------
// Blocks

ResNetBasicBlockImpl::ResNetBasicBlockImpl(int64_t inplanes, int64_t planes, int64_t stride,
                                           nn::Sequential downsample_) {
  conv1 = register_module("conv1", conv3x3(inplanes, planes, stride));
  bn1 = register_module("bn1", nn::BatchNorm2d(planes));
  conv2 = register_module("conv2", conv3x3(planes, planes, 1));
  bn2 = register_module("bn2", nn::BatchNorm2d(planes));
  if (downsample_) downsample = register_module("downsample", std::move(downsample_));
}

torch::Tensor ResNetBasicBlockImpl::forward(const torch::Tensor& x) {
  torch::Tensor out = torch::relu(bn1(conv1(x)));
  out = bn2(conv2(out));
  out += downsample ? downsample->forward(x) : x;
  return torch::relu(out);
}

ResNetBottleneckImpl::ResNetBottleneckImpl(int64_t inplanes, int64_t planes, int64_t stride,
                                           nn::Sequential downsample_) {
  conv1 = register_module("conv1", conv1x1(inplanes, planes, 1));
  bn1 = register_module("bn1", nn::BatchNorm2d(planes));
  conv2 = register_module("conv2", conv3x3(planes, planes, stride));
  bn2 = register_module("bn2", nn::BatchNorm2d(planes));
  conv3 = register_module("conv3", conv1x1(planes, planes * expansion, 1));
  bn3 = register_module("bn3", nn::BatchNorm2d(planes * expansion));
  if (downsample_) downsample = register_module("downsample", std::move(downsample_));
}

torch::Tensor ResNetBottleneckImpl::forward(const torch::Tensor& x) {
  torch::Tensor out = torch::relu(bn1(conv1(x)));
  out = torch::relu(bn2(conv2(out)));
  out = bn3(conv3(out));
  out += downsample ? downsample->forward(x) : x;
  return torch::relu(out);
}

// ---------------------------------------------------------------------------------------------
// ResNet

void init_resnet_weights(torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  for (const auto& m : model.modules(/*include_self=*/false)) {
    if (auto* conv = m->as<nn::Conv2d>()) {
      nn::init::kaiming_normal_(conv->weight, 0.0, torch::kFanOut, torch::kReLU);
    } else if (auto* bn = m->as<nn::BatchNorm2d>()) {
      nn::init::ones_(bn->weight);
      nn::init::zeros_(bn->bias);
    }
  }
}

ResNetImpl::ResNetImpl(ResNetBlock block, std::vector<int64_t> layers, int64_t num_classes,
                       int64_t in_channels) {
  STOKER_CHECK(layers.size() == 4, "a ResNet has 4 stages, got {} block counts", layers.size());
  STOKER_CHECK(num_classes > 0 && in_channels > 0,
               "a ResNet needs positive num_classes and in_channels, got {} and {}", num_classes,
               in_channels);
  conv1 = register_module(
      "conv1", nn::Conv2d(nn::Conv2dOptions(in_channels, 64, 7).stride(2).padding(3).bias(false)));
  bn1 = register_module("bn1", nn::BatchNorm2d(64));
  maxpool = register_module("maxpool", nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1)));
  layer1 = register_module("layer1", make_layer(block, 64, layers[0], 1));
  layer2 = register_module("layer2", make_layer(block, 128, layers[1], 2));
  layer3 = register_module("layer3", make_layer(block, 256, layers[2], 2));
  layer4 = register_module("layer4", make_layer(block, 512, layers[3], 2));
  avgpool = register_module("avgpool", nn::AdaptiveAvgPool2d(1));
  fc = register_module("fc", nn::Linear(inplanes_, num_classes));

  init_resnet_weights(*this);
}

nn::Sequential ResNetImpl::make_layer(ResNetBlock block, int64_t planes, int64_t blocks,
                                      int64_t stride) {
  const int64_t expansion = block == ResNetBlock::basic ? ResNetBasicBlockImpl::expansion
                                                        : ResNetBottleneckImpl::expansion;
  auto make_block = [&](int64_t inplanes, int64_t s, nn::Sequential downsample) {
    return block == ResNetBlock::basic
               ? nn::AnyModule(ResNetBasicBlock(inplanes, planes, s, std::move(downsample)))
               : nn::AnyModule(ResNetBottleneck(inplanes, planes, s, std::move(downsample)));
  };
  nn::Sequential downsample{nullptr};
  if (stride != 1 || inplanes_ != planes * expansion) {
    downsample = nn::Sequential(conv1x1(inplanes_, planes * expansion, stride),
                                nn::BatchNorm2d(planes * expansion));
  }
  nn::Sequential layer;
  layer->push_back(make_block(inplanes_, stride, downsample));
  inplanes_ = planes * expansion;
  for (int64_t i = 1; i < blocks; ++i) layer->push_back(make_block(inplanes_, 1, nullptr));
  return layer;
}

torch::Tensor ResNetImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = maxpool(torch::relu(bn1(conv1(x))));
  y = layer4->forward(layer3->forward(layer2->forward(layer1->forward(y))));
  return fc(torch::flatten(avgpool(y), 1));
}

ResNet resnet18(int64_t num_classes, int64_t in_channels) {
  return ResNet(ResNetBlock::basic, std::vector<int64_t>{2, 2, 2, 2}, num_classes, in_channels);
}
ResNet resnet34(int64_t num_classes, int64_t in_channels) {
  return ResNet(ResNetBlock::basic, std::vector<int64_t>{3, 4, 6, 3}, num_classes, in_channels);
}
ResNet resnet50(int64_t num_classes, int64_t in_channels) {
  return ResNet(ResNetBlock::bottleneck, std::vector<int64_t>{3, 4, 6, 3}, num_classes,
                in_channels);
}
ResNet resnet101(int64_t num_classes, int64_t in_channels) {
  return ResNet(ResNetBlock::bottleneck, std::vector<int64_t>{3, 4, 23, 3}, num_classes,
                in_channels);
}

// ---------------------------------------------------------------------------------------------
// State dicts

void save_state_dict(nn::Module& model, const fs::path& file) {
  const std::vector<char> bytes = StateDictWriter().write(state_of(model));
  write_file_atomically(file, std::string(bytes.begin(), bytes.end()));
}

void load_state_dict(nn::Module& model, const fs::path& file) {
  const std::string name = file.string();
  STOKER_CHECK(fs::is_regular_file(file), "state dict {} does not exist", name);
  std::ifstream in(file, std::ios::binary);
  STOKER_CHECK(in.is_open(), "cannot open state dict {}", name);
  c10::IValue value;
  try {
    value = StateDictReader(name, in).read();
  } catch (const c10::Error& e) {
    STOKER_FAIL(
        "cannot read {} as a torch.save file: {}; hint: save it in Python with "
        "torch.save(model.state_dict(), file) (the default zip format) or with "
        "save_state_dict",
        name, e.what_without_backtrace());
  }
  STOKER_CHECK(value.isGenericDict(),
               "{} holds a {}, not a dict of tensors; hint: save model.state_dict(), not the "
               "model itself",
               name, value.tagKind());

  std::map<std::string, at::Tensor> loaded;
  for (const auto& entry : value.toGenericDict()) {
    STOKER_CHECK(entry.key().isString(), "{}: a key of the dict is a {}, not a string", name,
                 entry.key().tagKind());
    const std::string key = entry.key().toStringRef();
    STOKER_CHECK(entry.value().isTensor(), "{}: key '{}' holds a {}, not a tensor", name, key,
                 entry.value().tagKind());
    loaded.emplace(key, entry.value().toTensor());
  }

  // Check everything before changing anything.
  const auto targets = state_of(model);
  std::vector<std::string> problems;
  for (const auto& [key, target] : targets) {
    auto it = loaded.find(key);
    if (it == loaded.end()) {
      problems.push_back(fmt::format("missing key '{}'", key));
    } else if (it->second.sizes() != target.sizes()) {
      problems.push_back(fmt::format("key '{}' has shape {} in the file but {} in the model", key,
                                     shape_text(it->second.sizes()), shape_text(target.sizes())));
    }
  }
  std::map<std::string, bool> known;
  for (const auto& entry : targets) known[entry.first] = true;
  for (const auto& entry : loaded) {
    if (!known.count(entry.first)) {
      problems.push_back(
          fmt::format("unexpected key '{}' (the model has no such parameter or "
                      "buffer)",
                      entry.first));
    }
  }
  if (!problems.empty()) {
    std::string list;
    const size_t shown = std::min<size_t>(problems.size(), 10);
    for (size_t i = 0; i < shown; ++i) list += (i ? "; " : "") + problems[i];
    if (problems.size() > shown) list += fmt::format("; and {} more", problems.size() - shown);
    STOKER_FAIL("{} does not fit the model ({} problem{}): {}; {}", name, problems.size(),
                problems.size() == 1 ? "" : "s", list, kLoadHint);
  }

  torch::NoGradGuard no_grad;
  for (const auto& [key, target] : targets) target.copy_(loaded.at(key));
}

}  // namespace stoker::models
