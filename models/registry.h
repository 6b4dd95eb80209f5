// The model registry: what a model is asked to be (ModelSpec), how it is built (ModelFactory), and
// the process-wide name -> factory table with Stoker's own models in it (compact_resnet,
// cifar_resnet20/56, resnet18/34/50/101; see the README's model table).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <torch/nn/modules/container/any.h>

#include "common/registry.h"

namespace stoker::models {

// What a model is asked to be: its configured architecture plus the shape of the data.
struct ModelSpec {
  std::string type = "compact_resnet";
  std::vector<int64_t> widths{16, 32, 64};
  std::vector<int64_t> blocks{1, 1, 1};
  double dropout = 0.0;
  // From the data set:
  int64_t in_channels = 1;
  int64_t num_classes = 10;
};

// Builds a model; the result is type-erased so that the Trainer can hold any module with a
// `forward(Tensor) -> Tensor`.
using ModelFactory = std::function<torch::nn::AnyModule(const ModelSpec&)>;

// The process-wide model registry, with Stoker's own models already in it. Applications add theirs
// with `model_registry().add("my_net", factory)` and then select them with `model.type: my_net`.
Registry<ModelFactory>& model_registry();

// Looks up `spec.type` and builds it.
torch::nn::AnyModule create_model(const ModelSpec& spec);

}  // namespace stoker::models
