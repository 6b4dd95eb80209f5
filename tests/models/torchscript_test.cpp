// TorchScript through the C++ tracer (models/torchscript.h): every registered model's trace shares
// its tensors under their names, matches its forward on another batch size, and loads back with
// torch::jit::load; a forward the trace cannot capture is refused.
#include "models/torchscript.h"

#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include "models/registry.h"
#include "test_util.h"

namespace stoker::models {
namespace {
namespace fs = std::filesystem;

// CPU float32, the same kernels on both sides: the trace runs the very operators the model does.
constexpr double kTolerance = 1e-5;

double max_relative_difference(const torch::Tensor& got, const torch::Tensor& want) {
  return (got - want).abs().max().item<double>() / std::max(1.0, want.abs().max().item<double>());
}

TEST(TorchScript, EveryRegisteredModelTracesToItsForwardAndLoadsBack) {
  testing::TempDir dir;
  torch::manual_seed(3);
  // Stoker's own models (models/registry.cpp; other tests register more in this process).
  for (const std::string type : {"compact_resnet", "mlp", "cifar_resnet20", "cifar_resnet56", "resnet18", "resnet34",
                                  "resnet50", "resnet101"}) {
    SCOPED_TRACE(type);
    torch::nn::AnyModule model = create_model(model_options(type), ModelShape{3, 10});
    model.ptr()->eval();
    const torch::Tensor example = torch::randn({2, 3, 32, 32}), check = torch::randn({3, 3, 32, 32});
    const auto forward = [&](const torch::Tensor& x) { return model.forward(x); };
    torch::jit::Module traced = trace_to_torchscript(*model.ptr(), forward, example, check, type, kTolerance);

    // The same tensors (not copies) under the same names, parameters and buffers apart.
    const auto params = model.ptr()->named_parameters(), buffers = model.ptr()->named_buffers();
    size_t n = 0;
    for (const auto& p : traced.named_parameters()) {
      ASSERT_TRUE(params.contains(p.name)) << p.name;
      EXPECT_TRUE(p.value.is_same(params[p.name])) << p.name;
      ++n;
    }
    EXPECT_EQ(n, params.size());
    n = 0;
    for (const auto& b : traced.named_buffers()) {
      ASSERT_TRUE(buffers.contains(b.name)) << b.name;
      EXPECT_TRUE(b.value.is_same(buffers[b.name])) << b.name;
      ++n;
    }
    EXPECT_EQ(n, buffers.size());

    const fs::path file = dir.path() / (type + ".pt");
    traced.save(file.string());
    torch::jit::Module loaded = torch::jit::load(file.string());
    loaded.eval();
    torch::NoGradGuard no_grad;
    const torch::Tensor input = torch::randn({4, 3, 32, 32});
    const double diff = max_relative_difference(loaded.forward({input}).toTensor(), model.forward(input));
    EXPECT_LE(diff, kTolerance);
    std::printf("[ torchscript ] %s: torch::jit::load'ed trace vs eager forward: %.3g relative\n", type.c_str(), diff);
  }
}

// A forward whose result depends on a value read on the host: the trace records one branch only.
struct BranchyImpl : torch::nn::Module {
  BranchyImpl() { scale = register_parameter("scale", torch::ones({1})); }
  torch::Tensor forward(const torch::Tensor& x) {
    return x.mean().item<double>() > 0 ? x * scale : x * scale * -3;
  }
  torch::Tensor scale;
};
TORCH_MODULE(Branchy);

TEST(TorchScript, RefusesAForwardTheTraceCannotCapture) {
  Branchy model;
  const auto forward = [&](const torch::Tensor& x) { return model->forward(x); };
  const std::string error = testing::error_of([&] {
    trace_to_torchscript(*model, forward, torch::ones({2, 4}), -torch::ones({3, 4}), "model.type branchy");
  });
  EXPECT_CONTAINS(error, "model.type branchy: its TorchScript trace differs from the model");
  EXPECT_CONTAINS(error, "--format state_dict");
}

}  // namespace
}  // namespace stoker::models
