// Fitting pretrained weights into a model (models/weights/pretrained.h).
#include "models/weights/pretrained.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/ranges.h>
#include <torch/torch.h>

#include "common/error.h"
#include "models/weights/key_pattern.h"
#include "models/weights/state_dict.h"

namespace stoker::models::weights {
namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string shape_text(c10::IntArrayRef sizes) { return fmt::format("[{}]", fmt::join(sizes, ", ")); }

// Removes the prefixes wrappers put before every key (DDP's module., Lightning's model.,
// torch.compile's _orig_mod.), as long as every key has one and the model has no such module.
std::vector<std::string> strip_wrappers(NamedTensors& tensors, const std::set<std::string>& model_keys) {
  std::vector<std::string> stripped;
  for (bool again = true; again && !tensors.empty();) {
    again = false;
    for (const std::string prefix : {"module.", "model.", "_orig_mod."}) {
      const bool all = std::all_of(tensors.begin(), tensors.end(), [&](const auto& t) { return starts_with(t.first, prefix); });
      const bool model_has = std::any_of(model_keys.begin(), model_keys.end(), [&](const std::string& k) { return starts_with(k, prefix); });
      if (!all || model_has) continue;
      for (auto& t : tensors) t.first = t.first.substr(prefix.size());
      stripped.push_back(prefix);
      again = true;
    }
  }
  return stripped;
}

// model.pretrained_rename: the longest `from` prefix a key starts with becomes `to`.
void rename(NamedTensors& tensors, const StringPairs& renames) {
  for (auto& [key, tensor] : tensors) {
    const std::pair<std::string, std::string>* best = nullptr;
    for (const auto& r : renames) {
      if (starts_with(key, r.first) && (best == nullptr || r.first.size() > best->first.size())) best = &r;
    }
    if (best != nullptr) key = best->second + key.substr(best->first.size());
  }
}

// Whether `file` and `model` differ in the first dimension alone (a classifier for other classes).
bool differs_in_classes_only(c10::IntArrayRef file, c10::IntArrayRef model) {
  if (file.size() != model.size() || file.empty()) return false;
  for (size_t i = 1; i < file.size(); ++i) {
    if (file[i] != model[i]) return false;
  }
  return true;
}

struct Problems {
  std::vector<std::string> missing, unexpected, misshaped;
  size_t count() const { return missing.size() + unexpected.size() + misshaped.size(); }
  std::string text() const {
    std::vector<std::string> parts;
    if (!missing.empty()) parts.push_back(fmt::format("{} missing from the file: {}", missing.size(), list_some(missing)));
    if (!misshaped.empty()) {
      parts.push_back(fmt::format("{} of another shape: {}", misshaped.size(), list_some(misshaped)));
    }
    if (!unexpected.empty()) {
      parts.push_back(fmt::format("{} the model does not have: {}", unexpected.size(), list_some(unexpected)));
    }
    return fmt::format("{}", fmt::join(parts, "; "));
  }
};

// What to do about a file that does not fit: the likeliest cause first.
std::string hint(const Problems& p, size_t model_keys) {
  if (!p.missing.empty() && !p.unexpected.empty() && p.missing.size() * 2 >= model_keys) {
    return "the file's names are not the model's: it is probably another architecture (check model.type), or "
           "names its tensors another way (map them with model.pretrained_rename: {\"their.prefix.\": \"\"})";
  }
  if (!p.misshaped.empty()) {
    return "the file is for another size of this architecture (check model.type and the data's channels), or "
           "leave those tensors initialised with model.pretrained_skip";
  }
  return "leave tensors out with model.pretrained_skip, or map names with model.pretrained_rename";
}

}  // namespace

std::vector<std::string> PretrainedFit::head_modules() const {
  std::vector<std::string> out;
  for (const std::string& key : reinitialised) {
    const std::string module = key.substr(0, key.rfind('.'));
    if (std::find(out.begin(), out.end(), module) == out.end()) out.push_back(module);
  }
  return out;
}

PretrainedFit fit_pretrained(torch::nn::Module& model, NamedTensors tensors, const PretrainedOptions& o,
                             const std::vector<std::string>& head_keys, const std::string& source,
                             const std::string& what, const PretrainedAdapter& adapt) {
  const NamedTensors targets = state_of(model);
  std::set<std::string> model_keys;
  for (const auto& t : targets) model_keys.insert(t.first);
  PretrainedFit fit;
  fit.stripped = strip_wrappers(tensors, model_keys);
  rename(tensors, o.rename);
  if (adapt) adapt(model, tensors);
  std::map<std::string, at::Tensor> file;
  for (auto& [key, tensor] : tensors) {
    if (!key_matches_any(o.skip, key)) file[key] = tensor;
  }
  Problems problems;
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // (model's, file's)
  for (const auto& [key, target] : targets) {
    const bool head = key_matches_any(head_keys, key);
    const auto found = file.find(key);
    if (key_matches_any(o.skip, key)) {
      fit.skipped.push_back(key);
    } else if (found == file.end()) {
      if (head) {
        fit.reinitialised.push_back(key);
      } else if (!ends_with(key, "num_batches_tracked")) {
        problems.missing.push_back(key);
      }
    } else if (found->second.sizes() != target.sizes()) {
      if (head && differs_in_classes_only(found->second.sizes(), target.sizes())) {
        fit.reinitialised.push_back(key);
      } else {
        problems.misshaped.push_back(fmt::format("{} ({} in the file, {} in the model)", key,
                                                 shape_text(found->second.sizes()), shape_text(target.sizes())));
      }
    } else {
      copies.emplace_back(target, found->second);
    }
  }
  for (const auto& [key, tensor] : file) {
    if (!model_keys.count(key)) problems.unexpected.push_back(key);
  }
  if (problems.count() > 0) {
    STOKER_FAIL("model.pretrained {} does not fit {} ({} problem{}): {}; {}", source, what, problems.count(),
                problems.count() == 1 ? "" : "s", problems.text(), hint(problems, targets.size()));
  }
  torch::NoGradGuard no_grad;
  for (auto& [target, value] : copies) target.copy_(value);
  fit.loaded = static_cast<int64_t>(copies.size());
  return fit;
}

}  // namespace stoker::models::weights
