// Reading and loading model.pretrained (recipe/pretrained.h).
#include "recipe/pretrained.h"

#include <optional>

#include <fmt/ranges.h>

#include "common/error.h"
#include "common/log.h"
#include "models/timm.h"
#include "models/weights/file_kind.h"
#include "models/weights/hub.h"
#include "models/weights/key_pattern.h"
#include "models/weights/pickle.h"
#include "models/weights/pretrained.h"
#include "models/weights/safetensors.h"
#include "models/weights/state_dict.h"
#include "models/weights/timm_names.h"
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

namespace {

// Refuses a config.json whose architecture the model type does not compute.
void check_hub_config(const weights::HubConfig& hub, const std::optional<weights::TimmDialect>& timm,
                      const std::string& spec, const std::string& type) {
  const std::string what = fmt::format("model.type {}", type);
  if (hub.architecture.empty()) return;
  STOKER_CHECK(timm.has_value(),
               "model.pretrained {} holds timm's {}, and {} has no timm twin; use the model.type that has (resnet*, "
               "convnext_*, vit_*, efficientnet_b*, mobilenet_v3_*: docs/finetuning.md lists which timm weights fit which)",
               spec, hub.architecture, what);
  weights::check_timm_architecture(*timm, hub.architecture, spec, what);
}

// The weights' own preprocessing (pretrained_cfg), for the log; a warning when the recipe normalises otherwise.
std::string trained_with(const weights::HubConfig& hub, const Config& config) {
  std::vector<std::string> parts;
  if (!hub.mean.empty()) parts.push_back(fmt::format("mean [{}]", fmt::join(hub.mean, ", ")));
  if (!hub.std.empty()) parts.push_back(fmt::format("std [{}]", fmt::join(hub.std, ", ")));
  if (hub.input_size.size() == 3) parts.push_back(fmt::format("{}x{}", hub.input_size[1], hub.input_size[2]));
  if (hub.crop_pct > 0) parts.push_back(fmt::format("crop_pct {}", hub.crop_pct));
  if (!hub.interpolation.empty()) parts.push_back(hub.interpolation);
  const bool other_mean = !hub.mean.empty() && hub.mean != config.data.mean;
  if (other_mean || (!hub.std.empty() && hub.std != config.data.std)) {
    logger().warn("model.pretrained {}: the weights were trained with mean [{}] and std [{}]; the recipe normalises "
                  "with data.mean [{}] and data.std [{}]",
                  config.pretrained.file, fmt::join(hub.mean, ", "), fmt::join(hub.std, ", "),
                  fmt::join(config.data.mean, ", "), fmt::join(config.data.std, ", "));
  }
  return parts.empty() ? "" : fmt::format("; trained with {}", fmt::join(parts, ", "));
}

std::vector<std::string> keys_of(const weights::NamedTensors& tensors) {
  std::vector<std::string> keys;
  for (const auto& t : tensors) keys.push_back(t.first);
  return keys;
}

}  // namespace

void apply_pretrained_cfg(Config& config, int64_t channels) {
  const data::DataSettings defaults;
  if (config.pretrained.file.empty() || config.data.mean != defaults.mean || config.data.std != defaults.std) return;
  weights::PretrainedSource source;
  try {
    source = weights::locate_pretrained(config.pretrained.file);
  } catch (const Error&) {
    return;  // load_pretrained says what is missing, with the command that fetches it
  }
  if (source.config.empty()) return;
  const weights::HubConfig hub = weights::read_hub_config(source.config);
  const auto size = static_cast<size_t>(channels);
  if (hub.mean.size() != size || hub.std.size() != size) return;
  config.data.mean = hub.mean;
  config.data.std = hub.std;
  logger().info("data.mean [{}] and data.std [{}]: the weights' (model.pretrained {}'s pretrained_cfg), as the recipe "
                "leaves them unset",
                fmt::join(hub.mean, ", "), fmt::join(hub.std, ", "), config.pretrained.file);
}

std::string load_pretrained(torch::nn::Module& model, const Config& config) {
  const std::string& spec = config.pretrained.file;
  const weights::PretrainedSource source = weights::locate_pretrained(spec);
  const std::string type_name = config.model.type(), what = fmt::format("model.type {}", type_name);
  const models::ModelType type = models::model_registry().get(type_name);
  const std::optional<weights::TimmDialect> timm = models::timm_dialect(type_name);
  std::optional<weights::HubConfig> hub;
  if (!source.config.empty()) {
    hub = weights::read_hub_config(source.config);
    check_hub_config(*hub, timm, spec, type_name);
  }
  bool timm_named = false;
  // A timm file's names become the model's, once its numerics are known to be the model's.
  const weights::PretrainedAdapter adapt = [&](const torch::nn::Module& m, weights::NamedTensors& tensors) {
    if (timm) {
      const std::vector<std::string> keys = keys_of(weights::state_of(model));
      timm_named = weights::names_are_timms(*timm, keys, tensors);
      if (timm_named || (hub && !hub->architecture.empty())) {
        const std::string differ = weights::timm_numerics_differ(*timm, model, what);
        STOKER_CHECK(differ.empty(), "model.pretrained {}: {}", spec, differ);
      }
      if (hub) weights::check_timm_model_args(*timm, model, hub->model_args, spec, what);
      if (timm_named) weights::from_timm_names(*timm, keys, tensors);
    }
    if (type.adapt_pretrained) type.adapt_pretrained(m, tensors);
  };
  const std::string file = source.weights.string();
  const weights::PretrainedFit fit =
      weights::fit_pretrained(model, read_weights_file(source.weights), config.pretrained, type.head_keys, file, what, adapt);
  std::string line = fmt::format("model.pretrained: {} ({}{} tensors", spec, file == spec ? "" : file + ", ", fit.loaded);
  if (hub && !hub->architecture.empty()) {
    line += fmt::format("; timm's {}{}", hub->architecture, hub->tag.empty() ? "" : "." + hub->tag);
  }
  if (timm_named) line += "; timm's names";
  if (!fit.reinitialised.empty()) {
    line += fmt::format("; head {} re-initialised for {} classes", fmt::join(fit.head_modules(), ", "),
                        config.data.num_classes);
  }
  if (!fit.skipped.empty()) line += fmt::format("; {} left initialised by model.pretrained_skip", fit.skipped.size());
  if (!fit.stripped.empty()) line += fmt::format("; the prefix {} removed from its keys", fmt::join(fit.stripped, ""));
  if (hub) line += trained_with(*hub, config);
  return line + ")";
}

}  // namespace stoker
