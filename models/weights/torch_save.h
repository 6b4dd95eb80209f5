// The file format of Python's torch.save, for what a state dict holds: a dict {name: tensor}.
//
// Hand-written on purpose: no C++ library reads Python's pickled collections.OrderedDict.
// libtorch's torch::pickle_load turns an OrderedDict into None, and torch::pickle_save tags its
// dict with a torch.jit._pickle.restore_type_tag call that Python's torch.load refuses unless
// weights_only=False. So the pickle is written here, by hand, and read by models/weights/pickle.h's
// unpickler; the zip container is libtorch's own (caffe2::serialize::PyTorchStreamReader/Writer).
//
// It knows no model: models/weights/state_dict.h maps modules onto it. It lives in models/ because
// exchanging weights with Python is part of what models/ owns; a checkpoint format in trainer/
// could use it as it is.
#pragma once

#include <filesystem>
#include <istream>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/ivalue.h>
#include <ATen/core/Tensor.h>

namespace stoker::models::weights {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// The bytes of a torch.save zip file holding the dict {name: tensor} in the given order, pickled
// exactly as Python pickles a plain dict of tensors (protocol 2, one storage record per tensor),
// so that Python reads it with plain torch.load(file), i.e. weights_only=True. Tensors are copied
// to the CPU and made contiguous. Throws stoker::Error for a dtype torch.save has no storage for.
std::string torch_save_bytes(const NamedTensors& tensors);

// The object pickled in the torch.save zip file `file`: a GenericDict for a dict or OrderedDict,
// with tensors (on the CPU, viewing the file's storages) as values. Reads containers, numbers,
// strings, tensors and parameters; anything else (a pickled module, a custom class) is refused.
// Throws stoker::Error naming the file, what is wrong and how to save it instead.
// `lenient`: objects of other classes are kept as placeholders (models/weights/pickle.h unpickle), so that
// the state dict inside a training checkpoint (timm's, Lightning's) can be found.
c10::IValue read_torch_save(const std::filesystem::path& file, bool lenient = false);
// The same, from the bytes of such a file in `in`; `name` stands for the file in messages.
c10::IValue read_torch_save(std::istream& in, const std::string& name, bool lenient = false);

}  // namespace stoker::models::weights
