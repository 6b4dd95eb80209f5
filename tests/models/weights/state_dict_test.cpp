// Tests of models/weights/state_dict.cpp, models/weights/torch_save.cpp and models/weights/pickle.cpp: a round trip in
// C++, strict loading and its errors, reading what Python's torch.save wrote (a checked-in golden
// from tests/models/weights/state_dict_golden.py), every opcode family of the unpickler, and the errors it
// gives for what a state dict never holds. With the libtorch venv's Python, also that Python's
// torch.load reads what save_state_dict writes.
#include "models/weights/state_dict.h"

#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "models/resnet.h"
#include "models/weights/pickle.h"
#include "models/weights/state_dict_golden.h"
#include "models/weights/torch_save.h"
#include "test_util.h"

namespace stoker::models::weights {
namespace {
namespace fs = std::filesystem;
namespace nn = torch::nn;
using testing::error_of;
using testing::TempDir;

std::map<std::string, torch::Tensor> state_map(nn::Module& model) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : model.named_parameters()) out[p.key()] = p.value();
  for (const auto& b : model.named_buffers()) out[b.key()] = b.value();
  return out;
}

void write_pickle(const fs::path& path, const c10::IValue& value) {
  const std::vector<char> bytes = torch::pickle_save(value);
  testing::write_bytes(path, std::string(bytes.begin(), bytes.end()));
}

// A torch.save-style zip holding `pickle` as data.pkl (and no storages).
void write_torch_zip(const fs::path& path, const std::string& pickle) {
  std::string out;
  caffe2::serialize::PyTorchStreamWriter zip([&](const void* data, size_t size) {
    out.append(static_cast<const char*>(data), size);
    return size;
  });
  zip.writeRecord("data.pkl", pickle.data(), pickle.size());
  zip.writeEndOfFile();
  testing::write_bytes(path, out);
}

// The model tests/models/weights/state_dict_golden.py saves: nn.Sequential(nn.Linear(3, 2),
// nn.BatchNorm1d(2)), its parameters named 0.weight, 0.bias, 1.weight, ... as in Python.
nn::Sequential linear_bn() { return nn::Sequential(nn::Linear(3, 2), nn::BatchNorm1d(2)); }

// The values state_dict_golden.py gives that model.
std::map<std::string, torch::Tensor> golden_values() {
  return {{"0.weight", torch::arange(6, torch::kFloat32).reshape({2, 3}) / 4},
          {"0.bias", torch::tensor({-1.5f, 2.5f})},
          {"1.weight", torch::tensor({0.5f, 2.0f})},
          {"1.bias", torch::tensor({0.25f, -0.75f})},
          {"1.running_mean", torch::tensor({1.0f, -1.0f})},
          {"1.running_var", torch::tensor({4.0f, 9.0f})},
          {"1.num_batches_tracked", torch::tensor(int64_t{7})}};
}

TEST(StateDict, ResNetRoundTripInCpp) {
  TempDir tmp;
  ResNet a = resnet18(10);
  ResNet b = resnet18(10);
  {
    // Make the BN statistics non-trivial, then copy a into b through a file.
    torch::NoGradGuard no_grad;
    a->train();
    a->forward(torch::randn({4, 3, 32, 32}));
  }
  save_state_dict(*a, tmp / "a.pt");
  load_state_dict(*b, tmp / "a.pt");
  auto sa = state_map(*a);
  auto sb = state_map(*b);
  for (const auto& [key, t] : sa) EXPECT_TRUE(t.equal(sb.at(key))) << key;
  EXPECT_EQ(sb.at("bn1.num_batches_tracked").item<int64_t>(), 1);
  a->eval();
  b->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor x = torch::randn({2, 3, 64, 64});
  EXPECT_TRUE(a->forward(x).equal(b->forward(x)));
}

TEST(StateDict, LoadErrorsNameTheFileAndKey) {
  TempDir tmp;
  ResNet model = resnet18(10);
  c10::Dict<std::string, at::Tensor> full;
  for (const auto& [key, t] : state_map(*model)) full.insert(key, t.detach().clone());
  const torch::Tensor before = state_map(*model).at("layer1.0.conv1.weight").clone();

  // A missing key.
  auto missing = full.copy();
  ASSERT_EQ(missing.erase("layer2.1.bn2.running_mean"), 1u);
  missing.insert_or_assign("layer1.0.conv1.weight", torch::zeros({64, 64, 3, 3}));
  write_pickle(tmp / "missing.pt", missing);
  std::string message = error_of([&] { load_state_dict(*model, tmp / "missing.pt"); });
  EXPECT_CONTAINS(message, (tmp / "missing.pt").string());
  EXPECT_CONTAINS(message, "missing key 'layer2.1.bn2.running_mean'");
  EXPECT_CONTAINS(message, "hint:");
  // Nothing was copied: the load checks everything first.
  EXPECT_TRUE(state_map(*model).at("layer1.0.conv1.weight").equal(before));

  // A shape mismatch (weights of a 5-class model).
  ResNet five = resnet18(5);
  save_state_dict(*five, tmp / "five.pt");
  message = error_of([&] { load_state_dict(*model, tmp / "five.pt"); });
  EXPECT_CONTAINS(message, (tmp / "five.pt").string());
  EXPECT_CONTAINS(message,
                  "key 'fc.weight' has shape [5, 512] in the file but [10, 512] in the model");
  EXPECT_CONTAINS(message, "key 'fc.bias' has shape [5]");

  // An extra key.
  auto extra = full.copy();
  extra.insert("fc2.weight", torch::zeros({3}));
  write_pickle(tmp / "extra.pt", extra);
  message = error_of([&] { load_state_dict(*model, tmp / "extra.pt"); });
  EXPECT_CONTAINS(message, "unexpected key 'fc2.weight'");

  // Not a dict, not a torch.save file, no file at all.
  write_pickle(tmp / "tensor.pt", torch::zeros({2}));
  EXPECT_CONTAINS(error_of([&] { load_state_dict(*model, tmp / "tensor.pt"); }),
                  "not a dict of tensors");
  testing::write_bytes(tmp / "junk.pt", "not a zip file");
  EXPECT_CONTAINS(error_of([&] { load_state_dict(*model, tmp / "junk.pt"); }),
                  "as a torch.save file");
  EXPECT_CONTAINS(error_of([&] { load_state_dict(*model, tmp / "none.pt"); }), "does not exist");
}


TEST(StateDict, ReadsWhatPythonsTorchSaveWrote) {
  TempDir tmp;
  const auto& bytes = golden::kTorchSaveLinearBn;
  testing::write_bytes(tmp / "python.pt", std::string(std::begin(bytes), std::end(bytes)));
  nn::Sequential model = linear_bn();
  load_state_dict(*model, tmp / "python.pt");
  const auto loaded = state_map(*model);
  ASSERT_EQ(loaded.size(), 7u);
  for (const auto& [key, value] : golden_values()) {
    EXPECT_EQ(loaded.at(key).scalar_type(), value.scalar_type()) << key;
    EXPECT_TRUE(loaded.at(key).equal(value)) << key << ": " << loaded.at(key);
  }
}

TEST(StateDict, StateOfListsParametersThenBuffersModuleByModule) {
  nn::Sequential model = linear_bn();
  std::vector<std::string> keys;
  for (const auto& [key, tensor] : state_of(*model)) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias",
                                            "1.running_mean", "1.running_var",
                                            "1.num_batches_tracked"}));
}

std::string bytes(std::initializer_list<unsigned char> b) {
  return std::string(b.begin(), b.end());
}

// A pickle (protocol 4, framed) that uses every opcode family the unpickler knows, for
// {'a': [1, -2, 3.5, None, True, 5], 'b': (1, 256, -1), 'c': <memo 0>, 'd': <memo 1>,
//  'e': 2**40, 'f': (), 'g': (7,), 'h': (7, False)}.
std::string every_opcode_pickle() {
  std::string p = bytes({0x80, 4, 0x95, 0, 0, 0, 0, 0, 0, 0, 0});  // PROTO 4, FRAME (length unused)
  p += bytes({'}', '('});                                         // EMPTY_DICT, MARK
  // 'a': EMPTY_LIST, BINPUT 0, MARK, BININT1 1, LONG1 -2, BINFLOAT 3.5 (big-endian), NONE,
  // NEWTRUE, APPENDS, BININT1 5, APPEND.
  p += bytes({0x8c, 1, 'a', ']', 'q', 0, '(', 'K', 1, 0x8a, 1, 0xfe});
  p += bytes({'G', 0x40, 0x0c, 0, 0, 0, 0, 0, 0, 'N', 0x88, 'e', 'K', 5, 'a'});
  // 'b': BININT1 1, BININT2 256, BININT -1, TUPLE3, MEMOIZE (index 1).
  p += bytes({0x8c, 1, 'b', 'K', 1, 'M', 0, 1, 'J', 0xff, 0xff, 0xff, 0xff, 0x87, 0x94});
  p += bytes({0x8c, 1, 'c', 'h', 0});                                 // 'c': BINGET 0
  p += bytes({'X', 1, 0, 0, 0, 'd', 'j', 1, 0, 0, 0});                // 'd': LONG_BINGET 1
  p += bytes({0x8c, 1, 'e', 0x8a, 8, 0, 0, 0, 0, 0, 1, 0, 0});        // 'e': LONG1 2**40
  p += bytes({0x8c, 1, 'f', ')', 'u'});                               // 'f': EMPTY_TUPLE; SETITEMS
  p += bytes({0x8c, 1, 'g', 'K', 7, 0x85, 's'});                      // 'g': TUPLE1, SETITEM
  // 'h': MARK, BININT1 7, NEWFALSE, TUPLE, LONG_BINPUT 2, SETITEM; STOP.
  p += bytes({0x8c, 1, 'h', '(', 'K', 7, 0x89, 't', 'r', 2, 0, 0, 0, 's', '.'});
  return p;
}

TEST(TorchSave, UnpicklesEveryOpcodeFamily) {
  TempDir tmp;
  write_torch_zip(tmp / "all.pt", every_opcode_pickle());
  const c10::IValue value = read_torch_save(tmp / "all.pt");
  ASSERT_TRUE(value.isGenericDict()) << value.tagKind();
  const auto dict = value.toGenericDict();
  ASSERT_EQ(dict.size(), 8u);
  const auto a = dict.at("a").toList();
  ASSERT_EQ(a.size(), 6u);
  EXPECT_EQ(a.get(0).toInt(), 1);
  EXPECT_EQ(a.get(1).toInt(), -2);
  EXPECT_EQ(a.get(2).toDouble(), 3.5);
  EXPECT_TRUE(a.get(3).isNone());
  EXPECT_TRUE(a.get(4).toBool());
  EXPECT_EQ(a.get(5).toInt(), 5);
  const auto b = dict.at("b").toTupleRef().elements();
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].toInt(), 1);
  EXPECT_EQ(b[1].toInt(), 256);
  EXPECT_EQ(b[2].toInt(), -1);
  EXPECT_EQ(dict.at("c").toList().size(), 6u);  // the memo holds the list, appended to since
  EXPECT_EQ(dict.at("d").toTupleRef().elements().size(), 3u);
  EXPECT_EQ(dict.at("e").toInt(), int64_t{1} << 40);
  EXPECT_EQ(dict.at("f").toTupleRef().elements().size(), 0u);
  EXPECT_EQ(dict.at("g").toTupleRef().elements()[0].toInt(), 7);
  const auto h = dict.at("h").toTupleRef().elements();
  ASSERT_EQ(h.size(), 2u);
  EXPECT_FALSE(h[1].toBool());
}

TEST(TorchSave, RefusesWhatAStateDictNeverHoldsNamingTheFile) {
  TempDir tmp;
  auto error_for = [&](const std::string& name, const std::string& pickle) {
    write_torch_zip(tmp / name, pickle);
    const std::string message = error_of([&] { read_torch_save(tmp / name); });
    EXPECT_CONTAINS(message, (tmp / name).string());
    EXPECT_CONTAINS(message, "hint:");
    return message;
  };
  EXPECT_CONTAINS(error_for("int.pt", bytes({0x80, 2, 'I', '1', '\n', '.'})),
                  "its pickle uses opcode 0x49, which a state dict does not");
  EXPECT_CONTAINS(error_for("call.pt", bytes({0x80, 2}) + "cos\nsystem\n)R."),
                  "it calls os.system, which a state dict of tensors does not");
  EXPECT_CONTAINS(error_for("short.pt", bytes({0x80, 2, '}', 'X', 5, 0, 0, 0, 'a', 'b'})),
                  "its pickle is truncated");
  EXPECT_CONTAINS(error_for("memo.pt", bytes({0x80, 2, 'h', 3, '.'})), "bad memo reference");
  EXPECT_CONTAINS(error_for("stack.pt", bytes({0x80, 2, '.'})), "empty stack");
  EXPECT_CONTAINS(error_for("append.pt", bytes({0x80, 2, '}', 'K', 1, 'a', '.'})),
                  "APPEND to a non-list");
  // The unpickler alone reports without a file name; read_torch_save adds it.
  EXPECT_THROW(pickle::unpickle(nullptr, nullptr, {}), pickle::Error);
}

// Found by fuzz_pickle (fuzz/regressions/pickle/): a _rebuild_tensor_v2 whose strides reach outside
// its storage made libtorch's as_strided throw c10::Error through pickle::unpickle, which promises
// pickle::Error (read_torch_save converted it; other callers got a foreign exception).
TEST(TorchSave, ATensorViewOutsideItsStorageIsAPickleError) {
  const std::string data = testing::read_bytes(fs::path(STOKER_SOURCE_DIR) /
                                               "fuzz/regressions/pickle/crash-view-outside-its-storage");
  const auto* begin = reinterpret_cast<const uint8_t*>(data.data());
  const pickle::StorageLoader zeros = [](const std::string&, const std::string&, int64_t numel) {
    return torch::zeros({numel});
  };
  try {
    pickle::unpickle(begin, begin + data.size(), zeros);
    ADD_FAILURE() << "no error";
  } catch (const pickle::Error& e) {
    EXPECT_CONTAINS(std::string(e.what()), "its pickle is malformed");
    EXPECT_CONTAINS(std::string(e.what()), "out of bounds for storage of size 24");
  }
}

// The message pickle::unpickle refuses `pickle` with (storages are zero tensors), or "" when it
// reads it.
std::string unpickle_error(const std::string& pickle) {
  const auto* begin = reinterpret_cast<const uint8_t*>(pickle.data());
  try {
    pickle::unpickle(begin, begin + pickle.size(),
                     [](const std::string&, const std::string&, int64_t n) { return torch::zeros({n}); });
  } catch (const pickle::Error& e) {
    return e.what();
  }
  return "";
}

// Found by reading the unpickler and confirmed with fuzz_pickle, or found by fuzz_pickle
// (fuzz/regressions/pickle/):
// 60,000 nested TUPLE1s, a 60 kB pickle, overflowed the stack when the result was destroyed (every
// program reading such a file crashed); a list appended to itself leaked (a reference cycle); and a
// MARK with the stack popped below it read outside the stack (std::length_error).
TEST(TorchSave, DeepNestingCyclesAndPopsBelowAMarkAreMalformedPickles) {
  EXPECT_CONTAINS(unpickle_error(bytes({0x80, 2, 'N'}) + std::string(60000, '\x85') + "."),
                  "it nests containers more than 100 deep");
  EXPECT_EQ(unpickle_error(bytes({0x80, 2, 'N'}) + std::string(99, '\x85') + "."), "");
  EXPECT_CONTAINS(unpickle_error(bytes({0x80, 2, ']', 'q', 0, 'h', 0, 'a', '.'})),
                  "it puts a container inside itself");
  // L0, L1; L1.append(L0); L0.append(L1): the second closes a cycle.
  EXPECT_CONTAINS(unpickle_error(bytes({0x80, 2, ']', 'q', 0, ']', 'q', 1, 'h', 0, 'a', 'a', '.'})),
                  "it changes a list or dict after placing it in another container");
  EXPECT_CONTAINS(unpickle_error(bytes({0x80, 2, 'N', 'N', '(', 0x86, 't', '.'})),
                  "the stack shrank below a mark");
  // Found by fuzz_pickle: an empty string where the storage class (a global) belongs, or as the
  // callable of REDUCE, threw std::out_of_range from substr(1).
  EXPECT_CONTAINS(unpickle_error(bytes({0x80, 2, '(', 0x8c, 7}) + "storage" + bytes({0x8c, 0, 0x8c, 1, '0', 0x8c, 0, 'K', 1, 't', 'Q', '.'})),
                  "unsupported persistent id");
  EXPECT_CONTAINS(unpickle_error(bytes({0x80, 2, 0x8c, 0, ')', 'R', '.'})), "it calls something");
  for (const char* name : {"crash-deep-tuples", "leak-list-inside-itself", "crash-pop-below-mark",
                           "crash-pop-below-mark-fuzzed", "crash-storage-class-not-a-global"}) {
    const std::string data =
        testing::read_bytes(fs::path(STOKER_SOURCE_DIR) / "fuzz/regressions/pickle" / name);
    EXPECT_NE(unpickle_error(data), "") << name;
  }
}

// A storage's element count comes from the pickle: it is checked against its record before
// anything is allocated (the old reader asked libtorch for the memory first).
TEST(TorchSave, AStorageClaimingMoreThanItsRecordIsRefusedBeforeAllocating) {
  TempDir tmp;
  auto text = [](const std::string& t) {  // BINUNICODE
    return bytes({'X', static_cast<unsigned char>(t.size()), 0, 0, 0}) + t;
  };
  // {'w': _rebuild_tensor_v2(storage of numel_long1 floats, 0, (1,), (1,), False, OrderedDict())}
  auto tensor_pickle = [&](const std::string& numel_long1) {
    return bytes({0x80, 2, '}', '('}) + text("w") + "ctorch._utils\n_rebuild_tensor_v2\n((" +
           text("storage") + "ctorch\nFloatStorage\n" + text("0") + text("cpu") + numel_long1 +
           "tQ" + bytes({'K', 0, 'K', 1, 0x85, 'K', 1, 0x85, 0x89}) +
           "ccollections\nOrderedDict\n)RtRu.";
  };
  write_torch_zip(tmp / "huge.pt", tensor_pickle(bytes({0x8a, 8, 0, 0, 0, 0, 0, 0, 0, 0x40})));
  EXPECT_CONTAINS(error_of([&] { read_torch_save(tmp / "huge.pt"); }),
                  "storage 0 claims 4611686018427387904 elements");
  write_torch_zip(tmp / "missing.pt", tensor_pickle(bytes({0x8a, 6, 0, 0, 0, 0, 0, 1})));
  EXPECT_CONTAINS(error_of([&] { read_torch_save(tmp / "missing.pt"); }), "it lacks the record data/0");
}

// Python's torch.load (weights_only=True) reads what save_state_dict writes, and the values match.
TEST(StateDictPython, TorchLoadReadsSaveStateDict) {
  std::string why;
  const fs::path python = testing::venv_python(&why);
  if (python.empty()) GTEST_SKIP() << why;
  TempDir tmp;
  nn::Sequential model = linear_bn();
  {
    torch::NoGradGuard no_grad;
    auto targets = state_map(*model);
    for (const auto& [key, value] : golden_values()) targets.at(key).copy_(value);
  }
  save_state_dict(*model, tmp / "stoker.pt");
  const fs::path script = fs::path(STOKER_SOURCE_DIR) / "tests" / "models" / "weights" / "state_dict_golden.py";
  const fs::path log = tmp / "check.log";
  const std::string command = "'" + python.string() + "' '" + script.string() + "' check '" +
                              (tmp / "stoker.pt").string() + "' >'" + log.string() + "' 2>&1";
  EXPECT_EQ(testing::shell(command), 0) << command << "\n" << testing::read_bytes(log);
}

}  // namespace
}  // namespace stoker::models::weights
