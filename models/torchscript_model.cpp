// A TorchScript module trained as a native one (models/torchscript_model.h).
#include "models/torchscript_model.h"

#include <filesystem>
#include <memory>

#include <fmt/ranges.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/torch.h>

#include "common/error.h"
#include "common/log.h"
#include "models/registry.h"
#include "models/weights/file_kind.h"

namespace stoker::models {
namespace fs = std::filesystem;

namespace {

constexpr const char* kHowToScript =
    "in Python: torch.jit.script(model).save(FILE) (timm and torchvision models script as they are)";

// One module of the script's tree, as an nn::Module: the script's own parameters and buffers
// registered under their names (sharing the tensors), its children likewise; train() sets the
// script module's `training` attribute (this module's alone: the children get their own call).
class ScriptNodeImpl : public torch::nn::Module {
 public:
  explicit ScriptNodeImpl(torch::jit::Module node) : node_(std::move(node)) {
    for (const auto& p : node_.named_parameters(/*recurse=*/false)) register_parameter(p.name, p.value, true);
    for (const auto& b : node_.named_buffers(/*recurse=*/false)) register_buffer(b.name, b.value);
    for (const auto& child : node_.named_children()) {
      register_module(child.name, std::make_shared<ScriptNodeImpl>(child.value));
    }
  }
  void train(bool on) override {
    torch::nn::Module::train(on);
    if (node_.hasattr("training")) node_.setattr("training", on);
  }

 private:
  torch::jit::Module node_;
};

torch::jit::Module load_script(const std::string& path) {
  const weights::FileDescription file = weights::describe_file(path);
  STOKER_CHECK(file.kind != weights::FileKind::kMissing && file.kind != weights::FileKind::kEmpty,
               "model.path {} is {}; give the TorchScript file of the network to train, saved {}", path, file.what,
               kHowToScript);
  STOKER_CHECK(file.kind == weights::FileKind::kTorchScript,
               "model.path {} is {}, not a TorchScript module; save the network {}{}", path, file.what, kHowToScript,
               file.kind == weights::FileKind::kZip || file.kind == weights::FileKind::kSafetensors
                   ? " (a file of weights goes to model.pretrained)"
                   : "");
  try {
    return torch::jit::load(path, torch::kCPU);
  } catch (const std::exception& e) {
    std::string why = e.what();
    why = why.substr(0, why.find('\n'));
    STOKER_FAIL("model.path {} is {} that TorchScript cannot load ({}); a Stoker checkpoint holds weights, not a "
                "network (give it as model.pretrained); save the network {}",
                path, file.what, why, kHowToScript);
  }
}

// The one image batch Stoker hands to forward: `forward(self, x: Tensor) -> Tensor` (further
// arguments only with defaults).
void check_signature(const torch::jit::Module& script, const std::string& path) {
  STOKER_CHECK(script.find_method("forward").has_value(),
               "model.path {} has no forward method; script the network itself, {}", path, kHowToScript);
  const c10::FunctionSchema& schema = script.get_method("forward").function().getSchema();
  const auto& args = schema.arguments();
  size_t required = 0;
  for (size_t i = 1; i < args.size(); ++i) required += args[i].default_value().has_value() ? 0 : 1;
  const bool takes_tensor = args.size() >= 2 && args[1].type()->isSubtypeOf(*c10::TensorType::get());
  const bool gives_tensor = schema.returns().size() == 1 && schema.returns()[0].type()->isSubtypeOf(*c10::TensorType::get());
  STOKER_CHECK(required == 1 && takes_tensor && gives_tensor,
               "model.path {}: its forward is {}, but Stoker calls it with one image batch and needs the logits "
               "back: forward(x: Tensor) -> Tensor; wrap the network in a module with that forward and script it",
               path, python_signature(schema));
}

// Whether a node of `block` or of the blocks nested in it (if/loop bodies) reads `training`.
bool block_reads_training(const torch::jit::Block* block) {
  for (const torch::jit::Node* node : block->nodes()) {
    if (node->kind() == c10::prim::GetAttr && node->s(c10::attr::name) == "training") return true;
    for (const torch::jit::Block* inner : node->blocks()) {
      if (block_reads_training(inner)) return true;
    }
  }
  return false;
}

bool reads_training(const torch::jit::Module& script) {
  for (const auto& m : script.modules()) {
    for (const auto& method : m.get_methods()) {
      const auto* f = dynamic_cast<const torch::jit::GraphFunction*>(&method.function());
      if (f != nullptr && block_reads_training(f->graph()->block())) return true;
    }
  }
  return false;
}

// BatchNorm or dropout somewhere (what behaves differently in training and evaluation).
bool has_mode_dependent_layers(const torch::jit::Module& script) {
  for (const auto& m : script.modules()) {
    if (m.hasattr("running_mean")) return true;
    const std::string type = m.type()->name() ? m.type()->name()->qualifiedName() : "";
    if (type.find("Dropout") != std::string::npos || type.find("DropPath") != std::string::npos) return true;
  }
  return false;
}

}  // namespace

void TorchScriptOptions::visit(OptionsVisitor& v) {
  v.field("path", path, rules::described("the path of a TorchScript file (torch.jit.script(model).save(path))"));
}

void TorchScriptOptions::check() const {
  if (path.empty()) {
    STOKER_FAIL("model.type: torchscript needs path: the file of the network saved {}", kHowToScript);
  }
}

std::string python_signature(const c10::FunctionSchema& schema) {
  std::vector<std::string> args;
  for (size_t i = 1; i < schema.arguments().size(); ++i) {
    const c10::Argument& a = schema.arguments()[i];
    args.push_back(fmt::format("{}: {}{}", a.name(), a.type()->annotation_str(),
                               a.default_value() ? " = ..." : ""));
  }
  std::vector<std::string> returns;
  for (const c10::Argument& r : schema.returns()) returns.push_back(r.type()->annotation_str());
  const std::string out = returns.size() == 1 ? returns[0] : fmt::format("({})", fmt::join(returns, ", "));
  return fmt::format("{}({}) -> {}", schema.name(), fmt::join(args, ", "), out);
}

TorchScriptModelImpl::TorchScriptModelImpl(const std::string& path, int64_t num_classes)
    : script_(load_script(path)), path_(path), num_classes_(num_classes) {
  check_signature(script_, path);
  for (const auto& p : script_.named_parameters(/*recurse=*/false)) register_parameter(p.name, p.value, true);
  for (const auto& b : script_.named_buffers(/*recurse=*/false)) register_buffer(b.name, b.value);
  for (const auto& child : script_.named_children()) {
    register_module(child.name, std::make_shared<ScriptNodeImpl>(child.value));
  }
  traced_ = has_mode_dependent_layers(script_) && !reads_training(script_);
  if (traced_) {
    logger().warn("model.path {} looks traced (torch.jit.trace), not scripted: it holds BatchNorm or dropout layers "
                  "but no code of it reads self.training, so it runs them as it did when it was traced, in training "
                  "and in evaluation alike; save it with torch.jit.script instead",
                  path);
  }
  train(true);
}

void TorchScriptModelImpl::train(bool on) {
  torch::nn::Module::train(on);
  if (script_.hasattr("training")) script_.setattr("training", on);
}

torch::Tensor TorchScriptModelImpl::forward(const torch::Tensor& x) {
  const c10::IValue out = script_.forward({x});
  STOKER_CHECK(out.isTensor(), "model.path {}: its forward returned a {}, not a tensor of logits", path_,
               out.tagKind());
  torch::Tensor logits = out.toTensor();
  STOKER_CHECK(logits.dim() == 2 && logits.size(0) == x.size(0) && logits.size(1) == num_classes_,
               "model.path {}: its forward gives outputs of shape [{}] for a batch of {}, but the data has {} "
               "classes: [{}, {}] was expected; script the network for {} classes (e.g. timm.create_model(..., "
               "num_classes={})) or set the data's number of classes",
               path_, fmt::join(logits.sizes(), ", "), x.size(0), num_classes_, x.size(0), num_classes_, num_classes_,
               num_classes_);
  return logits;
}

// Any network scripted in Python: model.path; its head and layers are its own keys (head_keys,
// layer_groups are unknown to the type).
void register_torchscript_model(FamilyRegistrar& r) {
  r.model("torchscript", model_type<TorchScriptOptions>([](const TorchScriptOptions& o, const ModelShape& shape) {
            o.check();
            return TorchScriptModel(o.path, shape.num_classes);
          }));
}

}  // namespace stoker::models
