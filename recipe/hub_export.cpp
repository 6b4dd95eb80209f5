// Exports as safetensors, in timm's names where the run is timm's (recipe/hub_export.h).
#include "recipe/hub_export.h"

#include <fmt/format.h>

#include "common/atomic_write.h"
#include "common/log.h"
#include "models/registry.h"
#include "models/timm.h"
#include "models/weights/hub.h"
#include "models/weights/key_pattern.h"
#include "models/weights/safetensors.h"
#include "models/weights/state_dict.h"
#include "models/weights/timm_names.h"

namespace stoker {
namespace fs = std::filesystem;
namespace weights = models::weights;

namespace {

// The timm config.json the run's weights came with, if they came from a timm Hub folder or cache entry
// that is still there.
std::optional<weights::HubConfig> timm_origin(const Config& config) {
  if (config.pretrained.file.empty()) return std::nullopt;
  weights::PretrainedSource source;
  try {
    source = weights::locate_pretrained(config.pretrained.file);
  } catch (const std::exception& e) {
    logger().warn("export: the run's model.pretrained {} is not there any more ({}); the weights keep the model's "
                  "names",
                  config.pretrained.file, e.what());
    return std::nullopt;
  }
  if (source.config.empty()) return std::nullopt;
  weights::HubConfig hub = weights::read_hub_config(source.config);
  if (hub.architecture.empty()) return std::nullopt;
  return hub;
}

// The number of features the classifier reads: the second dimension of the head's last matrix.
int64_t head_features(const weights::NamedTensors& state, const std::vector<std::string>& head_keys) {
  int64_t features = 0;
  for (const auto& [key, tensor] : state) {
    if (tensor.dim() == 2 && weights::key_matches_any(head_keys, key)) features = tensor.size(1);
  }
  return features;
}

}  // namespace

HubExport write_safetensors_export(torch::nn::Module& model, const Config& config,
                                   const std::vector<std::string>& class_names,
                                   const std::optional<std::pair<int64_t, int64_t>>& size, const fs::path& output) {
  weights::NamedTensors state = weights::state_of(model);
  const std::optional<weights::TimmDialect> dialect = models::timm_dialect(config.model.type());
  const std::optional<weights::HubConfig> origin = dialect ? timm_origin(config) : std::nullopt;
  HubExport out;
  if (!origin) {
    write_file_atomically(output, weights::safetensors_bytes(state, {{"format", "pt"}}));
    out.summary = "safetensors, the model's (torchvision's) names";
    return out;
  }
  const int64_t features = head_features(state, models::model_registry().get(config.model.type()).head_keys);
  state = weights::to_timm_names(*dialect, state);
  write_file_atomically(output, weights::safetensors_bytes(state, {{"format", "pt"}}));
  out.summary = fmt::format("safetensors, timm's names ({})", origin->architecture);
  if (output.filename() != "model.safetensors") {
    logger().info("export: {} is not named model.safetensors, so no config.json is written beside it (a Hub folder "
                  "holds model.safetensors and config.json)",
                  output.string());
    return out;
  }
  weights::HubConfig hub = *origin;
  hub.num_classes = config.data.num_classes;
  // The weights' own label names where the run kept their head and its data named no classes (indices).
  bool indices = true;
  for (size_t c = 0; c < class_names.size(); ++c) indices = indices && class_names[c] == std::to_string(c);
  const bool kept = origin->num_classes == config.data.num_classes && !origin->label_names.empty();
  hub.label_names = kept && indices ? origin->label_names : class_names;
  hub.mean = config.data.mean;
  hub.std = config.data.std;
  if (size) hub.input_size = {static_cast<int64_t>(config.data.mean.size()), size->first, size->second};
  for (auto& [key, value] : hub.model_args) {
    if (key == "num_classes") value = std::to_string(hub.num_classes);
  }
  out.config = output.parent_path() / "config.json";
  write_file_atomically(out.config, weights::hub_config_text(hub, features));
  return out;
}

}  // namespace stoker
