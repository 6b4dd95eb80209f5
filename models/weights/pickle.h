// Python's pickle format, as far as a state dict needs it: the opcodes, and an unpickler for what
// torch.save (Python) and torch::pickle_save (C++) emit for a dict or OrderedDict of tensors.
//
// Hand-written on purpose: no C++ library reads Python's pickled collections.OrderedDict
// (libtorch's own torch::pickle_load turns it into None). The subset: containers (tuple, list,
// dict), numbers, strings, None/True/False, the memo, persistent ids for storages, and REDUCE on
// the globals collections.OrderedDict, torch._utils._rebuild_tensor_v2 / _rebuild_parameter and
// torch.jit._pickle.restore_type_tag; BUILD only on a dict (an OrderedDict's _metadata, dropped).
// Anything else (a pickled module, a custom class) is refused, naming the opcode or the global, or
// in lenient mode kept as an opaque placeholder (see unpickle).
// models/weights/torch_save.h wraps it in torch.save's zip file and writes the pickles this reads.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

#include <ATen/core/ivalue.h>

namespace stoker::models::weights::pickle {

// The opcodes a state dict uses (Python's Lib/pickletools.py documents each).
namespace op {
constexpr uint8_t kProto = 0x80, kFrame = 0x95, kStop = '.';
constexpr uint8_t kMark = '(', kEmptyTuple = ')', kTuple = 't', kTuple1 = 0x85, kTuple2 = 0x86,
                  kTuple3 = 0x87;
constexpr uint8_t kEmptyDict = '}', kEmptyList = ']', kAppend = 'a', kAppends = 'e',
                  kSetItem = 's', kSetItems = 'u';
constexpr uint8_t kGlobal = 'c', kReduce = 'R', kBuild = 'b', kBinPersId = 'Q', kNewObj = 0x81;
constexpr uint8_t kBinPut = 'q', kLongBinPut = 'r', kMemoize = 0x94, kBinGet = 'h',
                  kLongBinGet = 'j';
constexpr uint8_t kBinInt1 = 'K', kBinInt2 = 'M', kBinInt = 'J', kLong1 = 0x8a, kBinFloat = 'G';
constexpr uint8_t kBinUnicode = 'X', kShortBinUnicode = 0x8c;
constexpr uint8_t kNone = 'N', kNewTrue = 0x88, kNewFalse = 0x89;
}  // namespace op

// Why a pickle was refused (truncated, malformed, or outside the subset), without the file's
// name: the caller adds it and a hint.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Returns the flat storage that a persistent id ('storage', <storage_class>, key, location, numel)
// names, e.g. storage_class "torch.FloatStorage"; called for every such id in the pickle (an id
// repeats where tensors share a storage).
using StorageLoader = std::function<at::Tensor(const std::string& storage_class,
                                               const std::string& key, int64_t numel)>;

// The key under which a lenient unpickle records the class of an object it did not rebuild.
inline constexpr const char* kOpaqueClassKey = "\x01class";

// Runs the pickle [begin, end) and returns the object it builds: dicts and OrderedDicts as
// GenericDicts, tensors as views (as_strided) of the storages `load_storage` returns.
// `lenient`: objects of other classes (a training checkpoint's argparse.Namespace, Lightning's
// hyper-parameters, numpy scalars), built by REDUCE or NEWOBJ, become dicts holding only
// {kOpaqueClassKey: "module.Class"} (and the items SETITEMS puts in them), so that the tensors of a
// checkpoint around a state dict can be found; nothing is ever called. Throws pickle::Error.
c10::IValue unpickle(const uint8_t* begin, const uint8_t* end, const StorageLoader& load_storage,
                     bool lenient = false);

}  // namespace stoker::models::weights::pickle
