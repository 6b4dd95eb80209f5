// TorchScript from a libtorch (C++ frontend) model, through libtorch's own C++ tracer: what
// `trainer export --format torchscript` writes, loadable with `torch.jit.load` in Python and
// `torch::jit::load` in C++.
//
//   torch::jit::Module traced = stoker::models::trace_to_torchscript(*model.ptr(), forward, example);
//   traced.save("model.pt");
//
// Why tracing rather than TorchScript source written for our known model types: the tracer records
// the ATen operators any `forward` actually runs, so it serves every registered model (Stoker's and
// an application's own) with one code path and no second copy of each architecture to keep in step.
// The models' forwards are straight-line tensor code (no control flow on values), which is exactly
// what a trace captures; the result is checked against the eager forward on a second input of
// another batch size, so a model whose forward a trace does not capture is refused, not exported
// wrong.
#pragma once

#include <functional>
#include <string>

#include <torch/csrc/jit/api/module.h>
#include <torch/nn/module.h>
#include <torch/types.h>

namespace stoker::models {

// A torch::jit::Module mirroring `model`'s module tree: one submodule per child (same names), and
// the same parameters and buffers under the same names, sharing their tensors (not copies), plus
// the `training` attribute TorchScript modules carry. Class names are
// `__torch__.<C++ type name>` (e.g. `__torch__.stoker.models.CompactResNetImpl`). No methods yet.
torch::jit::Module mirror_module(const torch::nn::Module& model);

// Traces `forward` (the model's forward pass, e.g. AnyModule::forward) on `example` into a
// `forward` method of mirror_module(model), with the parameters and buffers read from the module's
// attributes (so they stay inspectable and state_dict() works in Python). Put the model in the mode
// to capture (eval) first: batch norm and dropout are traced as they run. Then runs the traced
// method on `check_input` (another batch size, so that no size is baked in) and compares with
// `forward`; a stoker::Error when tracing fails or the results differ by more than `tolerance`
// (max absolute difference relative to the largest output, at least 1), naming `what` and saying
// what to do instead.
torch::jit::Module trace_to_torchscript(torch::nn::Module& model,
                                        const std::function<torch::Tensor(const torch::Tensor&)>& forward,
                                        const torch::Tensor& example, const torch::Tensor& check_input,
                                        const std::string& what, double tolerance = 1e-5);

}  // namespace stoker::models
