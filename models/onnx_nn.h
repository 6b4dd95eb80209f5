// The ONNX exporters of libtorch's own modules (torch::nn::Conv2d, BatchNorm2d, Linear, ReLU,
// MaxPool2d, AvgPool2d, AdaptiveAvgPool2d, Flatten, Dropout, Identity, Sequential), which cannot sit
// beside their modules, and the functional forms Stoker's modules call in their forwards
// (torch::relu, torch::flatten, torch::adaptive_avg_pool2d) as nodes. Exporters of the eval-mode
// network: dropout is the identity; a batch norm uses its running statistics.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/registry.h"
#include "models/onnx_export.h"

namespace stoker::models {

// Adds the exporters of libtorch's modules above to `registry` (onnx_registry.cpp does, once).
void add_torch_nn_exporters(Registry<OnnxExporter>& registry);

// torch::flatten(x, 1) of a tensor of any rank: [N, ...] -> [N, product of the rest].
std::string onnx_flatten(OnnxExport& e, const std::string& x);

// torch::adaptive_avg_pool2d(x, {height, width}) (-1: the input's own size): GlobalAveragePool for
// 1x1, else an AveragePool whose window divides the input's static size; a size that does not divide
// is a stoker::Error naming both.
std::string onnx_adaptive_avg_pool2d(OnnxExport& e, const std::string& x, int64_t height, int64_t width);

}  // namespace stoker::models
