// A small multilayer perceptron with no batch normalisation and no dropout: the input is average-
// pooled to `pool` x `pool` per channel, flattened, then passed through `hidden` fully connected
// layers (ReLU after each) and a linear classifier. Its gradient over a batch is the mean of its
// per-sample gradients, whatever the batch is split into: the model for checking that data-parallel
// ranks with half batches train exactly as one process with whole ones (BatchNorm normalises each
// rank's half on its own), and for quick smoke runs. Registered as `mlp`.
// Parameter names: `layers.fc<i>` (i = 0.. for the hidden layers), `layers.classifier`.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/options.h"
#include "models/layer_groups.h"
#include "models/shape.h"

namespace stoker::models {

namespace onnx { class OnnxExport; }  // models/onnx/export.h

// mlp's own keys (model.hidden, model.pool).
struct MlpOptions : TypeOptionsOf<MlpOptions> {
  std::vector<int64_t> hidden{64};  // widths of the hidden layers; [] = a linear classifier
  int64_t pool = 4;                 // the input is average-pooled to pool x pool first
  void visit(OptionsVisitor& v) override;
  void check() const override;
};

// mlp's layers for optimizer.layer_decay: each hidden layer layers.fc<i>, then the classifier.
std::vector<LayerGroup> mlp_layer_groups();

class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(const MlpOptions& options, const ModelShape& shape);
  torch::Tensor forward(const torch::Tensor& x);
  int64_t pool() const { return pool_; }

 private:
  int64_t pool_ = 4;
  torch::nn::Sequential layers{nullptr};
};
TORCH_MODULE(Mlp);

// The MLP's ONNX exporter (models/onnx/export.h): the adaptive pooling (whose window must divide the
// input size), flatten, the layers.
std::string mlp_to_onnx(onnx::OnnxExport& e, const MlpImpl& net, const std::string& x);

}  // namespace stoker::models
