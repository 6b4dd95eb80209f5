// Keys of earlier recipes, read as the typed lists that replaced them: parse_config's step between
// the --set overrides and the reader (recipe/yaml_options.h). Saved configs of earlier runs (their
// config.yaml, the config in their checkpoints) hold them, so a resumed run reads them unchanged.
//
//   data.random_erasing: {...}, data.mixup: {...}
//       -> data.batch_ops: [{type: random_erasing, ...}, {type: mixup, ...}]   (an operation left off
//          when its keys turn it off: probability 0, no alpha and no cutmix_minmax)
//   logging.tensorboard: true | false, logging.mlflow: {tracking_uri, experiment, run_name}
//       -> logging.sinks: [metrics_file, console, tensorboard (unless false), mlflow (with a tracking_uri)]
//
// Each section rewritten is said in one note; an old key beside the list that replaced it is an error
// naming both.
#pragma once

#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace stoker {

// Rewrites the old keys of `root` (the text named `source`) in place; appends one note per section
// rewritten to `notes`.
void rewrite_legacy_keys(YAML::Node& root, const std::string& source, std::vector<std::string>& notes);

}  // namespace stoker
