// Training any network saved from Python with torch.jit.script (model.type: torchscript,
// model.path: FILE): timm's and torchvision's models script, so anything Python can build trains in
// Stoker without a C++ port.
//
// TorchScriptModel wraps the loaded torch::jit::Module in a torch::nn::Module that mirrors its
// module tree and registers the script's own parameters and buffers (the same tensors, not copies)
// under the same dotted names, so that everything which sees an nn::Module sees them: the optimizer,
// state dicts and checkpoints, the EMA, model.pretrained, model.freeze, moving to a device or dtype
// (in place). train()/eval() set the script's `training` attributes too, module by module, so its
// BatchNorm and dropout switch as a native model's do (and model.freeze can keep single BatchNorm
// layers in eval mode). forward() calls the script's forward on the image batch.
//
// Checked when loaded: the file is a TorchScript archive (a state dict or an image is named as
// such); its forward takes one image batch (forward(self, x: Tensor) -> Tensor; another signature
// is an error that names it); and a module whose code never reads `self.training` although it holds
// BatchNorm or dropout layers was traced (torch.jit.trace), not scripted: its train/eval branches were
// frozen when it was traced, which a warning says. The logits' shape is checked on every forward
// against the classes the data has (a host-side size check: no synchronisation).
#pragma once

#include <cstdint>
#include <string>

#include <torch/csrc/jit/api/module.h>
#include <torch/nn/module.h>

#include "common/options.h"
#include "models/shape.h"

namespace stoker::models {

// torchscript's own keys: model.path, the file torch.jit.save wrote.
struct TorchScriptOptions : TypeOptionsOf<TorchScriptOptions> {
  std::string path;
  void visit(OptionsVisitor& v) override;
  void check() const override;
};

class TorchScriptModelImpl : public torch::nn::Module {
 public:
  // Loads `path` (on the CPU) for data of `num_classes` classes. Throws stoker::Error naming the file
  // when it is not a TorchScript module, or its forward does not take one image batch.
  TorchScriptModelImpl(const std::string& path, int64_t num_classes);
  torch::Tensor forward(const torch::Tensor& x);
  void train(bool on = true) override;
  // The script itself (its tensors are this module's): what `trainer export --format torchscript`
  // saves for this model type, so that the file keeps its code, not a trace.
  torch::jit::Module& script() { return script_; }
  const std::string& path() const { return path_; }
  // Whether the module looked traced (see above); the warning was logged when it was loaded.
  bool traced() const { return traced_; }

 private:
  torch::jit::Module script_;
  std::string path_;
  int64_t num_classes_ = 0;
  bool traced_ = false;
};
TORCH_MODULE(TorchScriptModel);

// "forward(x: Tensor) -> Tensor": a method's signature as Python writes it, without self.
std::string python_signature(const c10::FunctionSchema& schema);

}  // namespace stoker::models
