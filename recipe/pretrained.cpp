// Reading and loading model.pretrained (recipe/pretrained.h).
#include "recipe/pretrained.h"

#include <optional>

#include <fmt/ranges.h>

#include "common/error.h"
#include "models/weights/file_kind.h"
#include "models/weights/key_pattern.h"
#include "models/weights/pickle.h"
#include "models/weights/pretrained.h"
#include "models/weights/safetensors.h"
#include "trainer/checkpoint.h"

namespace stoker {
namespace fs = std::filesystem;
namespace weights = models::weights;

namespace {

constexpr const char* kWhatToGive =
    "give a state dict saved with torch.save(model.state_dict(), FILE) (.pt or .pth), a .safetensors file, or a "
    "Stoker checkpoint";

// The class a lenient unpickle kept in place of an object, or "".
std::string opaque_class(const c10::impl::GenericDict& dict) {
  const auto found = dict.find(std::string(weights::pickle::kOpaqueClassKey));
  return found == dict.end() || !found->value().isString() ? "" : found->value().toStringRef();
}

// The dict's items if every value is a tensor (keys strings); nothing otherwise.
std::optional<weights::NamedTensors> tensors_of(const c10::impl::GenericDict& dict) {
  weights::NamedTensors out;
  for (const auto& item : dict) {
    if (!item.key().isString() || !item.value().isTensor()) return std::nullopt;
    out.emplace_back(item.key().toStringRef(), item.value().toTensor());
  }
  if (out.empty()) return std::nullopt;
  return out;
}

std::vector<std::string> keys_of(const c10::impl::GenericDict& dict) {
  std::vector<std::string> out;
  for (const auto& item : dict) out.push_back(item.key().isString() ? item.key().toStringRef() : item.key().tagKind());
  return out;
}

}  // namespace

weights::NamedTensors find_state_dict(const c10::IValue& value, const std::string& file) {
  STOKER_CHECK(value.isGenericDict(), "model.pretrained {} holds a {}, not a state dict; {}", file, value.tagKind(),
               kWhatToGive);
  const c10::impl::GenericDict dict = value.toGenericDict();
  const std::string cls = opaque_class(dict);
  STOKER_CHECK(cls.empty(),
               "model.pretrained {} holds a pickled {} object (torch.save(model) saves the whole module), not a "
               "state dict; save its weights with torch.save(model.state_dict(), FILE)",
               file, cls);
  STOKER_CHECK(dict.size() > 0, "model.pretrained {} holds an empty dict, no weights; {}", file, kWhatToGive);
  if (std::optional<weights::NamedTensors> tensors = tensors_of(dict)) return *tensors;
  for (const char* key : {"state_dict", "model_state_dict", "model", "module", "net", "network"}) {
    const auto found = dict.find(std::string(key));
    if (found == dict.end() || !found->value().isGenericDict()) continue;
    if (std::optional<weights::NamedTensors> tensors = tensors_of(found->value().toGenericDict())) return *tensors;
  }
  STOKER_FAIL("model.pretrained {} holds a dict with the keys {}, but neither is it a state dict (names to tensors) "
              "nor does it hold one under state_dict, model_state_dict, model, module, net or network; {}",
              file, weights::list_some(keys_of(dict)), kWhatToGive);
}

weights::NamedTensors read_weights_file(const fs::path& path) {
  const std::string file = path.string();
  const weights::FileDescription d = weights::describe_file(path);
  switch (d.kind) {
    case weights::FileKind::kSafetensors:
      return weights::read_safetensors(path);
    case weights::FileKind::kZip:
      return find_state_dict(weights::read_torch_save(path, /*lenient=*/true), file);
    case weights::FileKind::kTorchScript:
      if (is_stoker_checkpoint(path)) return read_checkpoint_weights(path);
      STOKER_FAIL("model.pretrained {} is a TorchScript network (torch.jit.save), not weights; train it as it is with "
                  "model.type: torchscript and model.path: {}, or save its weights with "
                  "torch.save(model.state_dict(), FILE)",
                  file, file);
    case weights::FileKind::kLegacyTorch:
      STOKER_FAIL("model.pretrained {} is {}, which Stoker does not read; save it again in the zip format: in Python, "
                  "torch.save(torch.load(\"{}\"), \"NEW.pth\")",
                  file, d.what, file);
    case weights::FileKind::kMissing:
      STOKER_FAIL("model.pretrained {} is {}; download the weights first (docs/finetuning.md says where) or fix the "
                  "path",
                  file, d.what);
    default:
      STOKER_FAIL("model.pretrained {} is {}, not weights; {}", file, d.what, kWhatToGive);
  }
}

std::string load_pretrained(torch::nn::Module& model, const Config& config) {
  const std::string& file = config.pretrained.file;
  const models::ModelType type = models::model_registry().get(config.model.type());
  const weights::PretrainedFit fit =
      weights::fit_pretrained(model, read_weights_file(file), config.pretrained, type.head_keys, file,
                             fmt::format("model.type {}", config.model.type()), type.adapt_pretrained);
  std::string line = fmt::format("model.pretrained: {} ({} tensors", file, fit.loaded);
  if (!fit.reinitialised.empty()) {
    line += fmt::format("; head {} re-initialised for {} classes", fmt::join(fit.head_modules(), ", "),
                        config.data.num_classes);
  }
  if (!fit.skipped.empty()) line += fmt::format("; {} left initialised by model.pretrained_skip", fit.skipped.size());
  if (!fit.stripped.empty()) line += fmt::format("; the prefix {} removed from its keys", fmt::join(fit.stripped, ""));
  return line + ")";
}

}  // namespace stoker
