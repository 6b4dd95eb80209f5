// The multilayer perceptron (models/mlp.h).
#include "models/mlp.h"

#include <torch/torch.h>

#include "common/error.h"
#include "models/onnx/export.h"
#include "models/onnx/nn.h"
#include "models/registry.h"

namespace stoker::models {
namespace nn = torch::nn;

void MlpOptions::visit(OptionsVisitor& v) {
  v.field("hidden", hidden, rules::items(rules::at_least(1), 0));
  v.field("pool", pool, rules::at_least(1));
}

void MlpOptions::check() const {
  if (pool < 1) STOKER_FAIL("pool must be at least 1, got {}", pool);
  for (const int64_t h : hidden) {
    if (h < 1) STOKER_FAIL("hidden widths must be at least 1, got {}", h);
  }
}

std::vector<LayerGroup> mlp_layer_groups() { return {{"hidden", {{"^layers\\.fc(\\d+)"}}}}; }

MlpImpl::MlpImpl(const MlpOptions& spec, const ModelShape& shape) : pool_(spec.pool) {
  spec.check();
  nn::Sequential body;
  int64_t features = shape.in_channels * spec.pool * spec.pool;
  for (size_t i = 0; i < spec.hidden.size(); ++i) {
    body->push_back(fmt::format("fc{}", i), nn::Linear(features, spec.hidden[i]));
    body->push_back(fmt::format("relu{}", i), nn::ReLU());
    features = spec.hidden[i];
  }
  body->push_back("classifier", nn::Linear(features, shape.num_classes));
  layers = register_module("layers", body);
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  const torch::Tensor pooled = torch::adaptive_avg_pool2d(x, {pool_, pool_});
  return layers->forward(pooled.flatten(1));
}

std::string mlp_to_onnx(onnx::OnnxExport& e, const MlpImpl& net, const std::string& x) {
  const std::string pooled = onnx_adaptive_avg_pool2d(e, x, net.pool(), net.pool());
  return e.child(net, "layers", onnx_flatten(e, pooled));
}

// mlp: its head `layers.classifier`.
void register_mlp(FamilyRegistrar& r) {
  r.model("mlp", model_type<MlpOptions>([](const MlpOptions& o, const ModelShape& s) { return Mlp(o, s); })
                     .with_head({"layers.classifier"})
                     .with_layers(mlp_layer_groups()));
  r.exporter<MlpImpl>(&mlp_to_onnx);
}

}  // namespace stoker::models
