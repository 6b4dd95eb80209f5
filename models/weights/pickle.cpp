// The unpickler of models/weights/pickle.h: a stack, marks and a memo, and one small handler per opcode
// family, found through a table indexed by the opcode.
#include "models/weights/pickle.h"

#include <array>
#include <cstring>
#include <initializer_list>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <fmt/format.h>

namespace stoker::models::weights::pickle {
namespace {

std::vector<int64_t> int_tuple(const c10::IValue& v) {
  std::vector<int64_t> out;
  for (const auto& e : v.toTupleRef().elements()) out.push_back(e.toInt());
  return out;
}

// Globals are kept on the stack as strings "\x01module.name".
bool is_global(const c10::IValue& v, const char* name) {
  return v.isString() && v.toStringRef() == std::string("\x01") + name;
}
bool is_any_global(const c10::IValue& v) {
  return v.isString() && !v.toStringRef().empty() && v.toStringRef()[0] == '\x01';
}

[[noreturn]] void fail(const std::string& what) { throw Error(what); }

class Unpickler {
 public:
  // [begin, end) is the pickle; it must outlive the Unpickler.
  Unpickler(const StorageLoader& load_storage, const uint8_t* begin, const uint8_t* end, bool lenient)
      : load_storage_(load_storage), pos_(begin), end_(end), lenient_(lenient) {}

  c10::IValue run() {
    while (true) {
      const uint8_t code = take<uint8_t>();
      if (code == op::kStop) return pop();
      const Handler handler = handlers()[code];
      if (handler == nullptr) {
        fail(fmt::format("its pickle uses opcode 0x{:02x}, which a state dict does not", code));
      }
      (this->*handler)(code);
    }
  }

 private:
  using Handler = void (Unpickler::*)(uint8_t code);
  static const std::array<Handler, 256>& handlers();

  // The pickle's bytes.
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
    const auto* nl = static_cast<const uint8_t*>(std::memchr(pos_, '\n', end_ - pos_));
    if (nl == nullptr) fail("its pickle is truncated");
    std::string s(reinterpret_cast<const char*>(pos_), nl - pos_);
    pos_ = nl + 1;
    return s;
  }

  // The stack and its marks.
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
    if (start > stack_.size()) fail("its pickle is malformed (the stack shrank below a mark)");
    std::vector<c10::IValue> items(std::make_move_iterator(stack_.begin() + start),
                                   std::make_move_iterator(stack_.end()));
    stack_.resize(start);
    return items;
  }
  c10::IValue& top() {
    if (stack_.empty()) fail("its pickle is malformed (empty stack)");
    return stack_.back();
  }

  // The handlers, one per opcode family; `code` is the opcode read.
  void skip_framing(uint8_t code);
  void push_mark(uint8_t code);
  void build_tuple(uint8_t code);
  void push_empty_container(uint8_t code);
  void append_to_list(uint8_t code);
  void set_dict_items(uint8_t code);
  void push_global(uint8_t code);
  void reduce(uint8_t code);
  void new_object(uint8_t code);
  void build(uint8_t code);
  void load_persistent_storage(uint8_t code);
  void memo_put(uint8_t code);
  void memo_get(uint8_t code);
  void push_integer(uint8_t code);
  void push_float(uint8_t code);
  void push_string(uint8_t code);
  void push_constant(uint8_t code);

  c10::IValue call(const c10::IValue& callable, const c10::IValue& args);
  c10::IValue opaque(const c10::IValue& global) const;
  void place(const c10::IValue& parent, const c10::IValue& child);
  void check_changeable(const c10::IValue& container);
  int64_t take_long1();

  const StorageLoader& load_storage_;
  const uint8_t* pos_;
  const uint8_t* end_;
  bool lenient_ = false;
  std::vector<c10::IValue> stack_;
  std::vector<size_t> marks_;
  std::map<uint32_t, c10::IValue> memo_;
  // Containers by address: how deeply each nests, and those placed inside another one. `kept_`
  // holds each of them so that no address is reused by a later container.
  std::unordered_map<const void*, int> depth_;
  std::unordered_set<const void*> placed_;
  std::vector<c10::IValue> kept_;
};

// Deeper nesting is refused: destroying an IValue recurses once per level, so a pickle of a few
// kilobytes nesting tens of thousands of tuples would overflow the stack. A state dict nests
// about 5 deep (dict, _rebuild_tensor_v2's argument tuple, its size tuple).
constexpr int kMaxDepth = 100;

const void* container_id(const c10::IValue& v) {
  return v.isTuple() || v.isList() || v.isGenericDict() ? v.internalToPointer() : nullptr;
}

// Records that `child` now sits in the container `parent`. A placed container may not change any
// more (check_changeable), so no cycle can form (Python's state dicts never need one; a cycle of
// reference-counted IValues would leak) and each container's depth is final once it is placed.
void Unpickler::place(const c10::IValue& parent, const c10::IValue& child) {
  const void* p = container_id(parent);
  const void* c = container_id(child);
  if (p == nullptr || c == nullptr) return;
  if (p == c) fail("it puts a container inside itself, which a state dict does not");
  for (const auto& [id, value] : {std::pair{p, &parent}, std::pair{c, &child}}) {
    if (depth_.emplace(id, 1).second) kept_.push_back(*value);
  }
  placed_.insert(c);
  int& depth = depth_[p];
  depth = std::max(depth, depth_[c] + 1);
  if (depth > kMaxDepth) {
    fail(fmt::format("it nests containers more than {} deep, which a state dict does not", kMaxDepth));
  }
}

void Unpickler::check_changeable(const c10::IValue& container) {
  if (placed_.count(container_id(container))) {
    fail("it changes a list or dict after placing it in another container, which a state dict does not");
  }
}

const std::array<Unpickler::Handler, 256>& Unpickler::handlers() {
  static const std::array<Handler, 256> table = [] {
    std::array<Handler, 256> t{};  // nullptr: an opcode a state dict does not use
    auto set = [&t](std::initializer_list<uint8_t> codes, Handler handler) {
      for (uint8_t code : codes) t[code] = handler;
    };
    set({op::kProto, op::kFrame}, &Unpickler::skip_framing);
    set({op::kMark}, &Unpickler::push_mark);
    set({op::kEmptyTuple, op::kTuple, op::kTuple1, op::kTuple2, op::kTuple3},
        &Unpickler::build_tuple);
    set({op::kEmptyDict, op::kEmptyList}, &Unpickler::push_empty_container);
    set({op::kAppend, op::kAppends}, &Unpickler::append_to_list);
    set({op::kSetItem, op::kSetItems}, &Unpickler::set_dict_items);
    set({op::kGlobal}, &Unpickler::push_global);
    set({op::kReduce}, &Unpickler::reduce);
    set({op::kNewObj}, &Unpickler::new_object);
    set({op::kBuild}, &Unpickler::build);
    set({op::kBinPersId}, &Unpickler::load_persistent_storage);
    set({op::kBinPut, op::kLongBinPut, op::kMemoize}, &Unpickler::memo_put);
    set({op::kBinGet, op::kLongBinGet}, &Unpickler::memo_get);
    set({op::kBinInt1, op::kBinInt2, op::kBinInt, op::kLong1}, &Unpickler::push_integer);
    set({op::kBinFloat}, &Unpickler::push_float);
    set({op::kBinUnicode, op::kShortBinUnicode}, &Unpickler::push_string);
    set({op::kNone, op::kNewTrue, op::kNewFalse}, &Unpickler::push_constant);
    return t;
  }();
  return table;
}

void Unpickler::skip_framing(uint8_t code) {
  // PROTO's version and FRAME's length: the reader needs neither.
  if (code == op::kProto) {
    take<uint8_t>();
  } else {
    take<uint64_t>();
  }
}

void Unpickler::push_mark(uint8_t) { marks_.push_back(stack_.size()); }

void Unpickler::build_tuple(uint8_t code) {
  if (code == op::kEmptyTuple) {
    stack_.emplace_back(c10::ivalue::Tuple::create({}));
    return;
  }
  std::vector<c10::IValue> items;
  if (code == op::kTuple) {
    items = pop_to_mark();
  } else {  // TUPLE1..3: the top 1..3 items
    const size_t n = code - op::kTuple1 + 1;
    if (stack_.size() < n) fail("its pickle is malformed (short tuple)");
    items.assign(stack_.end() - n, stack_.end());
    stack_.resize(stack_.size() - n);
  }
  c10::IValue tuple = c10::ivalue::Tuple::create(items);
  for (const auto& item : items) place(tuple, item);
  stack_.push_back(std::move(tuple));
}

void Unpickler::push_empty_container(uint8_t code) {
  if (code == op::kEmptyDict) {
    stack_.emplace_back(c10::impl::GenericDict(c10::AnyType::get(), c10::AnyType::get()));
  } else {
    stack_.emplace_back(c10::impl::GenericList(c10::AnyType::get()));
  }
}

void Unpickler::append_to_list(uint8_t code) {
  std::vector<c10::IValue> items;
  if (code == op::kAppend) {
    items.push_back(pop());
  } else {
    items = pop_to_mark();
  }
  if (!top().isList()) fail(code == op::kAppend ? "APPEND to a non-list" : "APPENDS to a non-list");
  check_changeable(top());
  for (auto& v : items) {
    place(top(), v);
    top().toList().push_back(std::move(v));
  }
}

void Unpickler::set_dict_items(uint8_t code) {
  std::vector<c10::IValue> items;
  if (code == op::kSetItem) {
    c10::IValue v = pop(), k = pop();
    items = {std::move(k), std::move(v)};
  } else {
    items = pop_to_mark();
  }
  if (!top().isGenericDict() || items.size() % 2) {
    fail(code == op::kSetItem ? "SETITEM on a non-dict" : "SETITEMS on a non-dict");
  }
  check_changeable(top());
  auto dict = top().toGenericDict();
  for (size_t i = 0; i < items.size(); i += 2) {
    place(top(), items[i]);
    place(top(), items[i + 1]);
    dict.insert_or_assign(items[i], items[i + 1]);
  }
}

void Unpickler::push_global(uint8_t) {
  std::string module = take_line();
  std::string name = take_line();
  stack_.emplace_back("\x01" + module + "." + name);
}

void Unpickler::reduce(uint8_t) {
  c10::IValue args = pop(), callable = pop();
  stack_.push_back(call(callable, args));
}

// NEWOBJ: cls.__new__(cls, *args), how protocol 2 pickles an instance of a plain class.
void Unpickler::new_object(uint8_t) {
  const c10::IValue args = pop(), cls = pop();
  if (!lenient_ || !is_any_global(cls)) {
    fail("it makes an object of " + (is_any_global(cls) ? cls.toStringRef().substr(1) : std::string("a class")) +
         ", which a state dict of tensors does not");
  }
  stack_.push_back(opaque(cls));
}

c10::IValue Unpickler::opaque(const c10::IValue& global) const {
  c10::impl::GenericDict dict(c10::AnyType::get(), c10::AnyType::get());
  dict.insert(std::string(kOpaqueClassKey), global.toStringRef().substr(1));
  return dict;
}

void Unpickler::build(uint8_t) {
  // Only an OrderedDict's state (state_dict()'s _metadata), which a dict of tensors does not need.
  pop();
  if (!top().isGenericDict()) fail("it builds an object other than a dict");
}

void Unpickler::memo_put(uint8_t code) {
  uint32_t index = 0;
  if (code == op::kBinPut) {
    index = take<uint8_t>();
  } else if (code == op::kLongBinPut) {
    index = take<uint32_t>();
  } else {  // MEMOIZE: the next free index
    index = static_cast<uint32_t>(memo_.size());
  }
  memo_[index] = top();
}

void Unpickler::memo_get(uint8_t code) {
  const uint32_t index = code == op::kBinGet ? take<uint8_t>() : take<uint32_t>();
  auto it = memo_.find(index);
  if (it == memo_.end()) fail("its pickle is malformed (bad memo reference)");
  stack_.push_back(it->second);
}

void Unpickler::push_integer(uint8_t code) {
  switch (code) {
    case op::kBinInt1:
      stack_.emplace_back(static_cast<int64_t>(take<uint8_t>()));
      break;
    case op::kBinInt2:
      stack_.emplace_back(static_cast<int64_t>(take<uint16_t>()));
      break;
    case op::kBinInt:
      stack_.emplace_back(static_cast<int64_t>(take<int32_t>()));
      break;
    default:
      stack_.emplace_back(take_long1());
  }
}

// LONG1: a length byte, then that many bytes of a little-endian two's-complement integer.
int64_t Unpickler::take_long1() {
  const uint8_t n = take<uint8_t>();
  if (n > 8) fail("it holds an integer too large");
  const std::string b = take_bytes(n);
  int64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= static_cast<int64_t>(static_cast<uint8_t>(b[i])) << (8 * i);
  if (n > 0 && n < 8 && (static_cast<uint8_t>(b[n - 1]) & 0x80)) v -= int64_t(1) << (8 * n);
  return v;
}

void Unpickler::push_float(uint8_t) {
  uint64_t bits = 0;  // BINFLOAT is big-endian
  for (int i = 0; i < 8; ++i) bits = (bits << 8) | take<uint8_t>();
  double d;
  std::memcpy(&d, &bits, 8);
  stack_.emplace_back(d);
}

void Unpickler::push_string(uint8_t code) {
  const uint32_t n = code == op::kBinUnicode ? take<uint32_t>() : take<uint8_t>();
  stack_.emplace_back(take_bytes(n));
}

void Unpickler::push_constant(uint8_t code) {
  if (code == op::kNone) {
    stack_.emplace_back();
  } else {
    stack_.emplace_back(code == op::kNewTrue);
  }
}

// BINPERSID: the persistent id ('storage', torch.<T>Storage, key, location, numel) names a storage.
void Unpickler::load_persistent_storage(uint8_t) {
  const c10::IValue pid = pop();
  if (!pid.isTuple()) fail("unsupported persistent id");
  const auto& elements = pid.toTupleRef().elements();
  const std::vector<c10::IValue> e(elements.begin(), elements.end());
  if (e.size() != 5 || !e[0].isString() || e[0].toStringRef() != "storage" || !is_any_global(e[1]) ||
      !e[2].isString() || !e[3].isString() || !e[4].isInt()) {
    fail("unsupported persistent id");
  }
  // e[1] is a global: "\x01torch.FloatStorage".
  const std::string storage_class = e[1].toStringRef().substr(1);
  stack_.emplace_back(load_storage_(storage_class, e[2].toStringRef(), e[4].toInt()));
}

// REDUCE: the only callables a state dict of tensors uses.
c10::IValue Unpickler::call(const c10::IValue& callable, const c10::IValue& args) {
  if (!args.isTuple()) fail("its pickle is malformed (REDUCE without a tuple)");
  const auto& a = args.toTupleRef().elements();
  if (is_global(callable, "collections.OrderedDict")) {
    return c10::impl::GenericDict(c10::AnyType::get(), c10::AnyType::get());
  }
  if (is_global(callable, "torch._utils._rebuild_tensor_v2") && a.size() >= 4 &&
      a[0].isTensor() && a[1].isInt() && a[2].isTuple() && a[3].isTuple()) {
    return a[0].toTensor().as_strided(int_tuple(a[2]), int_tuple(a[3]), a[1].toInt());
  }
  if (is_global(callable, "torch._utils._rebuild_parameter") && !a.empty() && a[0].isTensor()) {
    return a[0];
  }
  if (is_global(callable, "torch.jit._pickle.restore_type_tag") && !a.empty()) {
    return a[0];  // torch::pickle_save's type annotation of a container
  }
  if (lenient_ && is_any_global(callable)) return opaque(callable);
  fail("it calls " + (is_any_global(callable) ? callable.toStringRef().substr(1) : "something") +
       ", which a state dict of tensors does not");
}


}  // namespace

c10::IValue unpickle(const uint8_t* begin, const uint8_t* end, const StorageLoader& load_storage, bool lenient) {
  try {
    return Unpickler(load_storage, begin, end, lenient).run();
  } catch (const c10::Error& e) {
    // libtorch refused what the pickle asked of it: a tensor view reaching outside its storage
    // (as_strided), or an IValue of another type where a number or a tuple belongs.
    fail(fmt::format("its pickle is malformed ({})", e.what_without_backtrace()));
  }
}

}  // namespace stoker::models::weights::pickle
