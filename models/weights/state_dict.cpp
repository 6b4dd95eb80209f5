// Saving and strictly loading a module's state dict (models/weights/state_dict.h).
#include "models/weights/state_dict.h"

#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/atomic_write.h"
#include "common/error.h"

namespace stoker::models::weights {
namespace fs = std::filesystem;

namespace {

constexpr const char* kLoadHint =
    "hint: the file must come from the same architecture with the same num_classes and "
    "in_channels (Python: torch.save(model.state_dict(), file); Stoker: save_state_dict)";

std::string shape_text(c10::IntArrayRef sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + "]";
}

// The dict {name: tensor} in `file`, or an error saying what else the file holds.
std::map<std::string, at::Tensor> read_tensor_dict(const fs::path& file) {
  const std::string name = file.string();
  STOKER_CHECK(fs::is_regular_file(file), "state dict {} does not exist", name);
  const c10::IValue value = read_torch_save(file);
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
  return loaded;
}

// Every way `loaded` does not fit `targets`: missing keys, shape mismatches, unexpected keys.
std::vector<std::string> mismatches(const NamedTensors& targets,
                                    const std::map<std::string, at::Tensor>& loaded) {
  std::vector<std::string> problems;
  std::set<std::string> known;
  for (const auto& [key, target] : targets) {
    known.insert(key);
    auto it = loaded.find(key);
    if (it == loaded.end()) {
      problems.push_back(fmt::format("missing key '{}'", key));
    } else if (it->second.sizes() != target.sizes()) {
      problems.push_back(fmt::format("key '{}' has shape {} in the file but {} in the model", key,
                                     shape_text(it->second.sizes()), shape_text(target.sizes())));
    }
  }
  for (const auto& entry : loaded) {
    if (!known.count(entry.first)) {
      problems.push_back(fmt::format(
          "unexpected key '{}' (the model has no such parameter or buffer)", entry.first));
    }
  }
  return problems;
}

}  // namespace

NamedTensors state_of(torch::nn::Module& model) {
  NamedTensors out;
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

void save_state_dict(torch::nn::Module& model, const fs::path& file) {
  write_file_atomically(file, torch_save_bytes(state_of(model)));
}

void load_state_dict(torch::nn::Module& model, const fs::path& file) {
  const std::map<std::string, at::Tensor> loaded = read_tensor_dict(file);
  // Check everything before changing anything.
  const NamedTensors targets = state_of(model);
  const std::vector<std::string> problems = mismatches(targets, loaded);
  if (!problems.empty()) {
    std::string list;
    const size_t shown = std::min<size_t>(problems.size(), 10);
    for (size_t i = 0; i < shown; ++i) list += (i ? "; " : "") + problems[i];
    if (problems.size() > shown) list += fmt::format("; and {} more", problems.size() - shown);
    STOKER_FAIL("{} does not fit the model ({} problem{}): {}; {}", file.string(), problems.size(),
                problems.size() == 1 ? "" : "s", list, kLoadHint);
  }
  torch::NoGradGuard no_grad;
  for (const auto& [key, target] : targets) target.copy_(loaded.at(key));
}

}  // namespace stoker::models::weights
