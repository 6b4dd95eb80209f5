// Hugging Face Hub folders and the local cache (models/weights/hub.h).
#include "models/weights/hub.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.h"

namespace stoker::models::weights {
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

constexpr const char* kWeightFiles[] = {"model.safetensors", "pytorch_model.bin"};

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  STOKER_CHECK(in.good(), "cannot read {}", file.string());
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// `entry` of `object` as T, or `fallback` when absent or null; throws naming the file and entry otherwise.
template <typename T>
T entry_or(const json& object, const char* entry, const T& fallback, const fs::path& file) {
  const auto found = object.find(entry);
  if (found == object.end() || found->is_null()) return fallback;
  try {
    return found->get<T>();
  } catch (const json::exception&) {
    STOKER_FAIL("{}: \"{}\" is {}, not what timm writes there; fix or remove the entry", file.string(), entry,
                found->dump());
  }
}

// The command that puts `repo` into the cache.
std::string download_command(const std::string& repo) {
  return "python -c \"from huggingface_hub import snapshot_download; snapshot_download('" + repo + "')\"";
}

// The snapshot folder of `repo` at `revision` in `cache`.
fs::path cached_snapshot(const fs::path& cache, const std::string& repo, const std::string& revision,
                         const std::string& spec) {
  std::string folder = "models--" + repo;
  for (size_t at = folder.find('/'); at != std::string::npos; at = folder.find('/')) folder.replace(at, 1, "--");
  const fs::path root = cache / folder;
  const std::string fix = fmt::format("Stoker never downloads: fetch it once with `{}` (or `hf download {}`), "
                                      "or point HF_HUB_CACHE or HF_HOME at the cache that has it",
                                      download_command(repo), repo);
  STOKER_CHECK(fs::is_directory(root), "model.pretrained {}: {} is not in the Hugging Face cache ({} has no {}); {}",
               spec, repo, cache.string(), folder, fix);
  std::string commit = revision;
  if (fs::is_regular_file(root / "refs" / revision)) {
    commit = read_text(root / "refs" / revision);
    while (!commit.empty() && (commit.back() == '\n' || commit.back() == '\r' || commit.back() == ' ')) commit.pop_back();
  }
  const fs::path snapshot = root / "snapshots" / commit;
  STOKER_CHECK(!commit.empty() && fs::is_directory(snapshot),
               "model.pretrained {}: the cache has {} but no snapshot of {} ({} names {}; {} is missing); {}", spec, repo,
               revision, (root / "refs" / revision).string(), commit.empty() ? "nothing" : commit, snapshot.string(), fix);
  return snapshot;
}

// The weights of Hub folder `folder`.
PretrainedSource hub_folder(const fs::path& folder, const std::string& spec) {
  PretrainedSource source;
  for (const char* name : kWeightFiles) {
    if (fs::exists(folder / name)) {
      source.weights = folder / name;
      break;
    }
  }
  STOKER_CHECK(!source.weights.empty(),
               "model.pretrained {}: the folder {} holds neither model.safetensors nor pytorch_model.bin; give a Hub "
               "model folder, or the weights file itself",
               spec, folder.string());
  if (fs::exists(folder / "config.json")) source.config = folder / "config.json";
  return source;
}

}  // namespace

HubConfig read_hub_config(const fs::path& file) {
  json j;
  try {
    j = json::parse(read_text(file));
  } catch (const json::parse_error& e) {
    STOKER_FAIL("{} is not JSON ({}); a Hub model folder's config.json is what timm's save_for_hf writes", file.string(),
                e.what());
  }
  STOKER_CHECK(j.is_object(), "{} holds {}, not an object", file.string(), j.type_name());
  HubConfig c;
  c.architecture = entry_or<std::string>(j, "architecture", "", file);
  c.num_classes = entry_or<int64_t>(j, "num_classes", 0, file);
  c.label_names = entry_or<std::vector<std::string>>(j, "label_names", {}, file);
  const json cfg = entry_or<json>(j, "pretrained_cfg", json::object(), file);
  c.mean = entry_or<std::vector<double>>(cfg, "mean", {}, file);
  c.std = entry_or<std::vector<double>>(cfg, "std", {}, file);
  c.input_size = entry_or<std::vector<int64_t>>(cfg, "input_size", {}, file);
  c.crop_pct = entry_or<double>(cfg, "crop_pct", 0, file);
  c.interpolation = entry_or<std::string>(cfg, "interpolation", "", file);
  c.tag = entry_or<std::string>(cfg, "tag", "", file);
  const json args = entry_or<json>(j, "model_args", json::object(), file);
  for (const auto& item : args.items()) {
    c.model_args.emplace_back(item.key(), item.value().dump());
  }
  return c;
}

std::string hub_config_text(const HubConfig& c, int64_t num_features) {
  json j;
  j["architecture"] = c.architecture;
  j["num_classes"] = c.num_classes;
  j["num_features"] = num_features;
  if (!c.label_names.empty()) j["label_names"] = c.label_names;
  if (!c.model_args.empty()) {
    json args = json::object();
    for (const auto& [key, value] : c.model_args) args[key] = json::parse(value);
    j["model_args"] = args;
  }
  json cfg = json::object();
  if (!c.tag.empty()) cfg["tag"] = c.tag;
  if (!c.input_size.empty()) cfg["input_size"] = c.input_size;
  if (!c.interpolation.empty()) cfg["interpolation"] = c.interpolation;
  if (c.crop_pct > 0) cfg["crop_pct"] = c.crop_pct;
  if (!c.mean.empty()) cfg["mean"] = c.mean;
  if (!c.std.empty()) cfg["std"] = c.std;
  cfg["num_classes"] = c.num_classes;
  j["pretrained_cfg"] = cfg;
  return j.dump(4) + "\n";
}

fs::path hub_cache_dir() {
  if (const std::string cache = env("HF_HUB_CACHE"); !cache.empty()) return cache;
  if (const std::string home = env("HF_HOME"); !home.empty()) return fs::path(home) / "hub";
  if (const std::string xdg = env("XDG_CACHE_HOME"); !xdg.empty()) return fs::path(xdg) / "huggingface" / "hub";
  return fs::path(env("HOME")) / ".cache" / "huggingface" / "hub";
}

PretrainedSource locate_pretrained(const std::string& spec) {
  if (spec.rfind("hf:", 0) == 0) {
    std::string repo = spec.substr(3), revision = "main";
    if (const size_t at = repo.find('@'); at != std::string::npos) {
      revision = repo.substr(at + 1);
      repo = repo.substr(0, at);
    }
    const size_t slash = repo.find('/');
    STOKER_CHECK(slash != std::string::npos && slash > 0 && slash + 1 < repo.size() &&
                     repo.find('/', slash + 1) == std::string::npos && !revision.empty(),
                 "model.pretrained {}: write a Hub model as hf:ORG/NAME (e.g. hf:timm/resnet50.a1_in1k), optionally "
                 "@REVISION",
                 spec);
    return hub_folder(cached_snapshot(hub_cache_dir(), repo, revision, spec), spec);
  }
  const fs::path path(spec);
  if (fs::is_directory(path)) return hub_folder(path, spec);
  PretrainedSource source{path, {}};
  const std::string name = path.filename().string();
  const bool hub_name = name == kWeightFiles[0] || name == kWeightFiles[1];
  if (hub_name && fs::exists(path.parent_path() / "config.json")) source.config = path.parent_path() / "config.json";
  return source;
}

}  // namespace stoker::models::weights
