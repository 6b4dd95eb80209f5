#include "recipe/legacy_keys.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"

namespace stoker {
namespace {

// Whether `node[key]` is absent or reads as 0 (a value that does not read as a number counts as set,
// so that the reader reports it where it now sits).
bool zero_or_absent(const YAML::Node& node, const char* key) {
  const YAML::Node value = node[key];
  if (!value.IsDefined() || value.IsNull()) return true;
  try {
    return value.as<double>() == 0.0;
  } catch (const YAML::Exception&) {
    return false;
  }
}

bool empty_or_absent(const YAML::Node& node, const char* key) {
  const YAML::Node value = node[key];
  return !value.IsDefined() || value.IsNull() || (value.IsSequence() && value.size() == 0);
}

// {type: <type>, ...the old section's keys}, keeping the nodes (and so their lines for messages).
YAML::Node typed_item(const std::string& type, const YAML::Node& keys) {
  YAML::Node item(YAML::NodeType::Map);
  item["type"] = type;
  if (keys.IsMap()) {
    for (const auto& kv : keys) item[kv.first] = kv.second;
  }
  return item;
}

[[noreturn]] void both_given(const std::string& source, const std::string& old_keys, const std::string& list) {
  throw Error(fmt::format("{}: {} and {} are both given; {} replaced {}: write everything under {} (see "
                          "docs/configuration.md)",
                          source, old_keys, list, list, old_keys, list));
}

void rewrite_data(YAML::Node data, const std::string& source, std::vector<std::string>& notes) {
  const YAML::Node erasing = data["random_erasing"], mixup = data["mixup"];
  if (!erasing.IsDefined() && !mixup.IsDefined()) return;
  if (data["batch_ops"].IsDefined()) both_given(source, "data.random_erasing / data.mixup", "data.batch_ops");
  YAML::Node ops(YAML::NodeType::Sequence);
  std::vector<std::string> kept;
  if (erasing.IsDefined() && !(erasing.IsMap() && zero_or_absent(erasing, "probability"))) {
    ops.push_back(typed_item("random_erasing", erasing));
    kept.push_back("random_erasing");
  }
  const bool mixup_off = mixup.IsMap() && zero_or_absent(mixup, "mixup_alpha") &&
                         zero_or_absent(mixup, "cutmix_alpha") && empty_or_absent(mixup, "cutmix_minmax");
  if (mixup.IsDefined() && !mixup_off) {
    ops.push_back(typed_item("mixup", mixup));
    kept.push_back("mixup");
  }
  data.remove("random_erasing");
  data.remove("mixup");
  data["batch_ops"] = ops;
  notes.push_back(fmt::format("{}: data.random_erasing / data.mixup (keys of earlier recipes) read as data.batch_ops: "
                              "[{}]; write that list instead",
                              source, kept.empty() ? std::string("(none: both off)") : fmt::format("{}", fmt::join(kept, ", "))));
}

void rewrite_logging(YAML::Node logging, const std::string& source, std::vector<std::string>& notes) {
  const YAML::Node tensorboard = logging["tensorboard"], mlflow = logging["mlflow"];
  if (!tensorboard.IsDefined() && !mlflow.IsDefined()) return;
  if (logging["sinks"].IsDefined()) both_given(source, "logging.tensorboard / logging.mlflow", "logging.sinks");
  YAML::Node sinks(YAML::NodeType::Sequence);
  std::vector<std::string> kept = {"metrics_file", "console"};
  sinks.push_back(typed_item("metrics_file", YAML::Node()));
  sinks.push_back(typed_item("console", YAML::Node()));
  bool tensorboard_on = true;
  if (tensorboard.IsDefined()) {
    try {
      tensorboard_on = tensorboard.as<bool>();
    } catch (const YAML::Exception&) {
      throw Error(fmt::format("{}: logging.tensorboard at line {}: expected true or false, got '{}'", source,
                              tensorboard.Mark().line + 1, tensorboard.IsScalar() ? tensorboard.Scalar() : "a mapping"));
    }
  }
  if (tensorboard_on) {
    sinks.push_back(typed_item("tensorboard", YAML::Node()));
    kept.push_back("tensorboard");
  }
  // Off, as before, without a tracking_uri or with an empty one; anything else goes on to the reader.
  const YAML::Node uri = mlflow.IsMap() ? mlflow["tracking_uri"] : YAML::Node();
  const bool mlflow_on =
      mlflow.IsDefined() && (!mlflow.IsMap() || (uri.IsDefined() && !(uri.IsScalar() && uri.Scalar().empty())));
  if (mlflow_on) {
    sinks.push_back(typed_item("mlflow", mlflow));
    kept.push_back("mlflow");
  }
  logging.remove("tensorboard");
  logging.remove("mlflow");
  logging["sinks"] = sinks;
  notes.push_back(fmt::format("{}: logging.tensorboard / logging.mlflow (keys of earlier recipes) read as logging.sinks: "
                              "[{}]; write that list instead",
                              source, fmt::join(kept, ", ")));
}

}  // namespace

void rewrite_legacy_keys(YAML::Node& root, const std::string& source, std::vector<std::string>& notes) {
  if (!root.IsMap()) return;
  if (root["data"].IsMap()) rewrite_data(root["data"], source, notes);
  if (root["logging"].IsMap()) rewrite_logging(root["logging"], source, notes);
}

}  // namespace stoker
