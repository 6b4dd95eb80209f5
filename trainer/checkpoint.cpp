#include "trainer/checkpoint.h"

#include <sstream>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <fmt/ranges.h>

#include "common/error.h"
#include "common/error_kinds.h"

namespace stoker {
namespace fs = std::filesystem;

namespace {
constexpr const char* kFormat = "stoker-checkpoint-v1";
const std::string kEmaPrefix = "ema.";
}  // namespace

namespace {

at::Generator cuda_generator(torch::Device device) {
  return at::globalContext().defaultGenerator(device);
}

void write_rng(torch::serialize::OutputArchive& archive, torch::Device device) {
  auto cpu = at::detail::getDefaultCPUGenerator();
  {
    std::lock_guard<std::mutex> lock(cpu.mutex());
    archive.write("rng.cpu", cpu.get_state());
  }
  if (device.is_cuda()) {
    auto gen = cuda_generator(device);
    std::lock_guard<std::mutex> lock(gen.mutex());
    archive.write("rng.cuda", gen.get_state());
  }
}

void read_rng(torch::serialize::InputArchive& archive, torch::Device device) {
  torch::Tensor state;
  if (archive.try_read("rng.cpu", state)) {
    auto cpu = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(cpu.mutex());
    cpu.set_state(state.cpu());
  }
  if (device.is_cuda() && archive.try_read("rng.cuda", state)) {
    auto gen = cuda_generator(device);
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(state.cpu());
  }
}

// Class names, one per line (a name holding a line break is refused).
std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) {
    STOKER_CHECK(name.find('\n') == std::string::npos, "the class name '{}' holds a line break; rename it", name);
    out += (out.empty() ? "" : "\n") + name;
  }
  return out;
}

std::vector<std::string> split_names(const std::string& text) {
  std::vector<std::string> names;
  size_t start = 0;
  for (size_t end; (end = text.find('\n', start)) != std::string::npos; start = end + 1) {
    names.push_back(text.substr(start, end - start));
  }
  names.push_back(text.substr(start));
  return names;
}

torch::Device device_of(torch::nn::Module& model) {
  for (const auto& p : model.parameters()) return p.device();
  return torch::kCPU;
}

}  // namespace

std::string serialize_checkpoint(torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                                 const CheckpointContent& content,
                                 const std::vector<CheckpointPart>& parts) {
  torch::serialize::OutputArchive archive;
  archive.write("format", torch::IValue(std::string(kFormat)));
  for (const auto& item : model.named_parameters()) archive.write("model." + item.key(), item.value());
  for (const auto& item : model.named_buffers()) archive.write("model." + item.key(), item.value(), true);
  torch::serialize::OutputArchive optim_archive;
  optimizer.save(optim_archive);
  archive.write("optimizer", optim_archive);
  for (const auto& part : parts) {
    torch::serialize::OutputArchive part_archive;
    part.save(part_archive);
    archive.write("part." + part.name, part_archive);
  }
  const TrainState& s = content.state;
  archive.write("state.epoch", torch::IValue(s.epoch));
  archive.write("state.batch_in_epoch", torch::IValue(s.batch_in_epoch));
  archive.write("state.step", torch::IValue(s.step));
  archive.write("state.best_metric", torch::IValue(s.best_metric));
  archive.write("state.best_epoch", torch::IValue(s.best_epoch));
  archive.write("state.early_stop_best", torch::IValue(s.early_stop_best));
  archive.write("state.early_stop_epoch", torch::IValue(s.early_stop_epoch));
  archive.write("state.world_size", torch::IValue(s.world_size));
  archive.write("state.batch_size", torch::IValue(s.batch_size));
  archive.write("state.accumulate_steps", torch::IValue(s.accumulate_steps));
  for (const auto& [name, tensor] : content.ema) archive.write(kEmaPrefix + name, tensor, true);
  if (!content.ema.empty()) archive.write("ema_updates", torch::IValue(content.ema_updates));
  archive.write("config", torch::IValue(content.config_yaml));
  if (!content.class_names.empty()) archive.write("class_names", torch::IValue(join_names(content.class_names)));
  write_rng(archive, device_of(model));

  std::ostringstream bytes;
  archive.save_to(bytes);
  return bytes.str();
}

void save_checkpoint(const fs::path& path, torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                     const CheckpointContent& content, const std::vector<CheckpointPart>& parts) {
  write_file_atomically(path, serialize_checkpoint(model, optimizer, content, parts));
}

namespace {

// Opens a checkpoint file and checks its format marker.
void open_checkpoint(const fs::path& path, torch::serialize::InputArchive& archive, torch::Device device) {
  const std::string name = path.string();
  STOKER_CHECK_FOUND(fs::is_regular_file(path), "checkpoint {} does not exist", name);
  const std::string what = describe_file(path);
  STOKER_CHECK(what.empty(), "{} is {}, not a Stoker checkpoint", name, what);
  try {
    archive.load_from(name, device);
  } catch (const std::exception& e) {
    std::string why = e.what();
    why = why.substr(0, why.find('\n'));
    STOKER_FAIL("checkpoint {} is unreadable ({}); it may be truncated or not a Stoker checkpoint: "
                "resume from another one (best.pt, or an earlier run)",
                name, why);
  }
  torch::IValue value;
  STOKER_CHECK(archive.try_read("format", value) && value.isString() &&
                   value.toStringRef() == kFormat,
               "{} is a TorchScript archive but not a Stoker checkpoint (no '{}' marker): a TorchScript module "
               "(trainer export --format torchscript, torch.jit.save) loads with torch.jit.load / torch::jit::load",
               name, kFormat);
}

}  // namespace

bool is_stoker_checkpoint(const fs::path& path) {
  try {
    torch::serialize::InputArchive archive;
    open_checkpoint(path, archive, torch::kCPU);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

std::vector<std::pair<std::string, torch::Tensor>> read_checkpoint_weights(const fs::path& path, bool ema) {
  torch::serialize::InputArchive archive;
  open_checkpoint(path, archive, torch::kCPU);
  const std::string prefix = ema ? kEmaPrefix : "model.";
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const std::string& key : archive.keys()) {
    if (key.rfind(prefix, 0) != 0) continue;
    torch::Tensor t;
    if (archive.try_read(key, t, /*is_buffer=*/true) || archive.try_read(key, t)) {
      out.emplace_back(key.substr(prefix.size()), t);
    }
  }
  STOKER_CHECK(!out.empty(), "checkpoint {} holds no {}", path.string(), ema ? "EMA of the weights" : "model weights");
  return out;
}

std::string read_checkpoint_config(const fs::path& path) {
  torch::serialize::InputArchive archive;
  open_checkpoint(path, archive, torch::kCPU);
  torch::IValue value;
  if (archive.try_read("config", value) && value.isString()) return value.toStringRef();
  return "";
}

int64_t read_checkpoint_world_size(const fs::path& path) {
  torch::serialize::InputArchive archive;
  open_checkpoint(path, archive, torch::kCPU);
  torch::IValue value;
  return archive.try_read("state.world_size", value) && value.isInt() ? value.toInt() : 0;
}

int64_t read_checkpoint_batch_size(const fs::path& path) {
  torch::serialize::InputArchive archive;
  open_checkpoint(path, archive, torch::kCPU);
  torch::IValue value;
  return archive.try_read("state.batch_size", value) && value.isInt() ? value.toInt() : 0;
}

int64_t resumed_batch_in_epoch(const TrainState& saved, int64_t world_size, int64_t batch_size,
                               int64_t accumulate_steps, const std::string& checkpoint) {
  const int64_t was_world = std::max<int64_t>(1, saved.world_size);
  const int64_t was_accumulate = std::max<int64_t>(1, saved.accumulate_steps);
  if (saved.batch_size <= 0 || batch_size <= 0 ||
      (was_world == world_size && saved.batch_size == batch_size && was_accumulate == accumulate_steps)) {
    return saved.batch_in_epoch;  // the same cut (or one a checkpoint from before it was recorded cannot tell)
  }
  const int64_t was_global = was_world * saved.batch_size * was_accumulate;
  const int64_t is_global = world_size * batch_size * accumulate_steps;
  STOKER_CHECK(was_global == is_global,
               "cannot resume {}: its run took {} samples per optimizer step ({} rank(s) x batch {} x {} "
               "accumulated), here a step would take {} ({} x {} x {}); keep the global batch, e.g. with "
               "--set train.effective_batch_size={} (the accumulation then adapts to the number of ranks) or "
               "--set data.batch_size={}",
               checkpoint, was_global, was_world, saved.batch_size, was_accumulate, is_global, world_size,
               batch_size, accumulate_steps, was_global, was_global / (world_size * accumulate_steps));
  const int64_t samples = saved.batch_in_epoch * saved.batch_size * was_world;  // into the epoch's order
  STOKER_CHECK(samples % (batch_size * world_size) == 0,
               "cannot resume {}: it stopped {} samples into epoch {}, which is not a whole number of batches of "
               "{} x {} rank(s)",
               checkpoint, samples, saved.epoch + 1, batch_size, world_size);
  return samples / (batch_size * world_size);
}

std::vector<std::string> read_checkpoint_class_names(const fs::path& path) {
  torch::serialize::InputArchive archive;
  open_checkpoint(path, archive, torch::kCPU);
  torch::IValue value;
  if (archive.try_read("class_names", value) && value.isString()) return split_names(value.toStringRef());
  return {};
}

namespace {

// Every parameter and buffer of `model`, by name, with matching shapes.
void read_model(torch::serialize::InputArchive& archive, const std::string& name, torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  auto load_into = [&](const std::string& key, torch::Tensor& target) {
    torch::Tensor loaded;
    STOKER_CHECK(archive.try_read("model." + key, loaded),
                 "checkpoint {} has no '{}': it was written for a different model; check model.* "
                 "in the config",
                 name, key);
    STOKER_CHECK(loaded.sizes() == target.sizes(),
                 "checkpoint {}: '{}' has shape {} but the model expects {}; check model.* in the "
                 "config",
                 name, key, fmt::join(loaded.sizes(), "x"), fmt::join(target.sizes(), "x"));
    target.copy_(loaded);
  };
  for (auto& item : model.named_parameters()) load_into(item.key(), item.value());
  for (auto& item : model.named_buffers()) load_into(item.key(), item.value());
}

// The optimizer's state and the extra parts' (loss scaler, ...), each rethrowing with the file.
void read_optimizer_and_parts(torch::serialize::InputArchive& archive, const std::string& name,
                              torch::optim::Optimizer* optimizer, const std::vector<CheckpointPart>& parts) {
  if (optimizer != nullptr) {
    torch::serialize::InputArchive optim_archive;
    STOKER_CHECK(archive.try_read("optimizer", optim_archive), "checkpoint {} holds no optimizer state",
                 name);
    try {
      optimizer->load(optim_archive);
    } catch (const std::exception& e) {
      std::string why = e.what();
      STOKER_FAIL("checkpoint {}: its optimizer state does not fit this optimizer ({}); resume with "
                  "the optimizer.* settings the run was started with",
                  name, why.substr(0, why.find('\n')));
    }
  }
  for (const auto& part : parts) {
    torch::serialize::InputArchive part_archive;
    if (!archive.try_read("part." + part.name, part_archive)) continue;
    try {
      part.load(part_archive);
    } catch (const std::exception& e) {
      std::string why = e.what();
      STOKER_FAIL("checkpoint {}: its '{}' state cannot be restored ({})", name, part.name,
                  why.substr(0, why.find('\n')));
    }
  }
}

// Where training stands, the EMA of the weights and the saved config.
CheckpointContent read_content(torch::serialize::InputArchive& archive, const std::string& name) {
  CheckpointContent content;
  torch::IValue value;
  auto read_int = [&](const char* key) {
    STOKER_CHECK(archive.try_read(key, value) && value.isInt(), "checkpoint {} lacks '{}'", name, key);
    return value.toInt();
  };
  content.state.epoch = read_int("state.epoch");
  content.state.batch_in_epoch = read_int("state.batch_in_epoch");
  content.state.step = read_int("state.step");
  content.state.best_epoch = read_int("state.best_epoch");
  STOKER_CHECK(archive.try_read("state.best_metric", value) && value.isDouble(),
               "checkpoint {} lacks 'state.best_metric'", name);
  content.state.best_metric = value.toDouble();
  // Not in checkpoints written before early stopping and the EMA existed: the defaults stand.
  if (archive.try_read("state.early_stop_best", value) && value.isDouble()) {
    content.state.early_stop_best = value.toDouble();
  }
  if (archive.try_read("state.early_stop_epoch", value) && value.isInt()) {
    content.state.early_stop_epoch = value.toInt();
  }
  auto read_optional_int = [&](const char* key) {
    return archive.try_read(key, value) && value.isInt() ? value.toInt() : int64_t{0};
  };
  content.state.world_size = read_optional_int("state.world_size");
  content.state.batch_size = read_optional_int("state.batch_size");
  content.state.accumulate_steps = read_optional_int("state.accumulate_steps");
  for (const std::string& key : archive.keys()) {
    if (key.rfind(kEmaPrefix, 0) != 0) continue;
    torch::Tensor tensor;
    archive.read(key, tensor, true);
    content.ema.emplace_back(key.substr(kEmaPrefix.size()), tensor);
  }
  if (!content.ema.empty()) content.ema_updates = read_int("ema_updates");
  if (archive.try_read("config", value) && value.isString()) content.config_yaml = value.toStringRef();
  // Not in checkpoints written before class names were saved, nor of data without names.
  if (archive.try_read("class_names", value) && value.isString()) content.class_names = split_names(value.toStringRef());
  return content;
}

}  // namespace

CheckpointContent load_checkpoint(const fs::path& path, torch::nn::Module& model,
                                  torch::optim::Optimizer* optimizer, torch::Device device,
                                  const std::vector<CheckpointPart>& parts) {
  const std::string name = path.string();
  torch::serialize::InputArchive archive;
  open_checkpoint(path, archive, device);
  read_model(archive, name, model);
  read_optimizer_and_parts(archive, name, optimizer, parts);
  CheckpointContent content = read_content(archive, name);
  read_rng(archive, device);
  return content;
}

}  // namespace stoker
