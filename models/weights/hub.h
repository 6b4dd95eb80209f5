// Hugging Face Hub model folders as model.pretrained reads them, and as `trainer export --format
// safetensors` writes them: a folder holding model.safetensors (or pytorch_model.bin) and config.json,
// given as a path or as `hf:ORG/NAME[@REVISION]`, which is found in the local Hugging Face cache only
// (never the network), laid out as huggingface_hub lays it out:
//   $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub
//     models--ORG--NAME/refs/main            the commit the snapshot of `main` is (REVISION: another ref)
//     models--ORG--NAME/snapshots/<commit>/  config.json, model.safetensors (links into blobs/)
// A missing entry is an error that prints the command that downloads it.
//
// config.json is timm's (timm.models.push_to_hf.save_for_hf writes it): "architecture" (timm's model
// name), "num_classes", optional "label_names", "pretrained_cfg" (how the weights were trained to see:
// input_size [C, H, W], mean, std, crop_pct, interpolation) and optional "model_args".
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace stoker::models::weights {

// What config.json says (only the entries Stoker reads; empty/0 where it says nothing).
struct HubConfig {
  std::string architecture;              // timm's, e.g. "resnet50"
  int64_t num_classes = 0;
  std::vector<std::string> label_names;  // one per class, when the file has them
  std::vector<double> mean, std;         // pretrained_cfg: normalisation
  std::vector<int64_t> input_size;       // pretrained_cfg: [C, H, W]
  double crop_pct = 0;                   // pretrained_cfg: the evaluation crop's fraction of the resized image
  std::string interpolation;             // pretrained_cfg: "bilinear", "bicubic"
  std::string tag;                       // pretrained_cfg: the weights' tag ("a1_in1k")
  // "model_args": what timm's constructor was given beyond its defaults, (key, value as JSON text).
  std::vector<std::pair<std::string, std::string>> model_args;
};

// Reads config.json; throws naming the file and the entry that is not what timm writes.
HubConfig read_hub_config(const std::filesystem::path& file);

// The text of a config.json in timm's layout, which timm.create_model(pretrained_cfg_overlay=...) and
// the Hub read: architecture, num_classes, num_features, label_names and model_args (when given) and
// pretrained_cfg.
std::string hub_config_text(const HubConfig& config, int64_t num_features);

// Where model.pretrained's weights are: the file, and config.json beside it (empty: none).
struct PretrainedSource {
  std::filesystem::path weights;
  std::filesystem::path config;
};

// The Hugging Face cache folder, from the environment as huggingface_hub reads it.
std::filesystem::path hub_cache_dir();

// `spec` as a weights file, a Hub folder, or `hf:ORG/NAME[@REVISION]` from hub_cache_dir(). Throws naming
// what is missing and, for hf:, the download command. A plain file is returned as it is (config.json is
// taken from beside it only when it is a Hub folder's).
PretrainedSource locate_pretrained(const std::string& spec);

}  // namespace stoker::models::weights
