// TorchScript through libtorch's C++ tracer (models/torchscript.h).
#include "models/torchscript.h"

#include <algorithm>
#include <cctype>
#include <memory>

#include <fmt/ranges.h>

#include <torch/csrc/jit/api/compilation_unit.h>
#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/torch.h>

#include "common/error.h"

namespace stoker::models {
namespace {

// `__torch__.` + the C++ type name as a dotted Python-style name: "stoker::models::BasicBlockImpl"
// -> "__torch__.stoker.models.BasicBlockImpl"; characters a Python identifier cannot hold
// (template brackets, spaces) become '_'.
c10::QualifiedName class_name_of(const torch::nn::Module& m) {
  std::vector<std::string> atoms = {"__torch__"};
  std::string atom;
  const std::string name = m.name();
  for (size_t i = 0; i <= name.size(); ++i) {
    const bool end = i == name.size() || name[i] == ':';
    if (!end) {
      const char c = name[i];
      atom += std::isalnum(static_cast<unsigned char>(c)) || c == '_' ? c : '_';
      continue;
    }
    if (!atom.empty()) atoms.push_back(std::isdigit(static_cast<unsigned char>(atom[0])) ? "_" + atom : atom);
    atom.clear();
  }
  if (atoms.size() == 1) atoms.push_back("Module");
  return c10::QualifiedName(atoms);
}

torch::jit::Module mirror_into(const torch::nn::Module& m, const std::shared_ptr<torch::jit::CompilationUnit>& cu) {
  // shouldMangle: each instance gets its own class (two BasicBlocks may differ in their shortcut).
  torch::jit::Module out(class_name_of(m), cu, /*shouldMangle=*/true);
  out.register_attribute("training", c10::BoolType::get(), m.is_training());
  for (const auto& p : m.named_parameters(/*recurse=*/false)) {
    if (p.value().defined()) out.register_parameter(p.key(), p.value(), /*is_buffer=*/false);
  }
  for (const auto& b : m.named_buffers(/*recurse=*/false)) {
    if (b.value().defined()) out.register_buffer(b.key(), b.value());
  }
  for (const auto& child : m.named_children()) out.register_module(child.key(), mirror_into(*child.value(), cu));
  return out;
}

double max_relative_difference(const torch::Tensor& got, const torch::Tensor& want) {
  const double scale = std::max(1.0, want.abs().max().item<double>());
  return (got.to(torch::kFloat64) - want.to(torch::kFloat64)).abs().max().item<double>() / scale;
}

}  // namespace

torch::jit::Module mirror_module(const torch::nn::Module& model) {
  return mirror_into(model, std::make_shared<torch::jit::CompilationUnit>());
}

torch::jit::Module trace_to_torchscript(torch::nn::Module& model,
                                        const std::function<torch::Tensor(const torch::Tensor&)>& forward,
                                        const torch::Tensor& example, const torch::Tensor& check_input,
                                        const std::string& what, double tolerance) {
  namespace tracer = torch::jit::tracer;
  torch::NoGradGuard no_grad;
  torch::jit::Module traced = mirror_module(model);
  std::shared_ptr<tracer::TracingState> state;
  try {
    // With `self`, the tracer maps every parameter and buffer of `traced` (the model's own tensors)
    // to attribute reads of the module, as Python's torch.jit.trace does for an nn.Module; the
    // graph's inputs are then (self, input).
    state = tracer::trace(
                {example}, [&](torch::jit::Stack inputs) -> torch::jit::Stack { return {forward(inputs[0].toTensor())}; },
                [](const torch::autograd::Variable&) { return std::string(); }, /*strict=*/true,
                /*force_outplace=*/false, &traced, {"input"})
                .first;
  } catch (const std::exception& e) {
    STOKER_FAIL("{} cannot be traced to TorchScript: {}\nexport it with --format state_dict instead", what, e.what());
  }
  // What Python's ScriptModule._create_method_from_trace does with the graph: a method of the class.
  const c10::QualifiedName method_name(*traced.type()->name(), "forward");
  torch::jit::Function* method = traced._ivalue()->compilation_unit()->create_function(method_name, state->graph);
  traced.type()->addMethod(method);

  const torch::Tensor want = forward(check_input);
  const torch::Tensor got = traced.forward({check_input}).toTensor();
  STOKER_CHECK(got.sizes() == want.sizes(),
               "{}: its TorchScript trace gives outputs of shape [{}] where the model gives [{}] for a batch of {} "
               "(the trace baked in a size); export it with --format state_dict instead",
               what, fmt::join(got.sizes(), ", "), fmt::join(want.sizes(), ", "), check_input.size(0));
  const double diff = max_relative_difference(got, want);
  STOKER_CHECK(diff <= tolerance,
               "{}: its TorchScript trace differs from the model by {:.3g} (relative to its largest output; at most {:.3g} "
               "allowed) on a second input: its forward depends on its input in ways a trace does not record (control "
               "flow on values, randomness in eval mode); export it with --format state_dict instead",
               what, diff, tolerance);
  return traced;
}

}  // namespace stoker::models
