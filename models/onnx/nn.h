// The ONNX exporters of libtorch's own modules (torch::nn::Conv2d, BatchNorm2d, Linear, ReLU,
// MaxPool2d, AvgPool2d, AdaptiveAvgPool2d, Flatten, Dropout, Identity, Sequential, LayerNorm, GELU,
// and a ModuleList its parent hands on whole: its entries in order), which cannot sit beside their
// modules, and the functional forms Stoker's modules call in their forwards (torch::relu,
// torch::flatten, torch::adaptive_avg_pool2d, torch::layer_norm, torch::gelu, torch::hardswish) as
// nodes. Exporters of the eval-mode
// network: dropout is the identity; a batch norm uses its running statistics.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/nn/modules/batchnorm.h>

#include "common/registry.h"
#include "models/onnx/export.h"

namespace stoker::models::onnx {

// Adds the exporters of libtorch's modules above to `registry` (models/registry.cpp does, once).
void add_torch_nn_exporters(Registry<OnnxExporter>& registry);

// torch::nn::BatchNorm2d's exporter (for a module derived from it: models::BatchNorm2d): a
// BatchNormalization on the running statistics.
std::string onnx_batch_norm2d(OnnxExport& e, const torch::nn::BatchNorm2dImpl& bn, const std::string& x);

// torch::flatten(x, 1) of a tensor of any rank: [N, ...] -> [N, product of the rest].
std::string onnx_flatten(OnnxExport& e, const std::string& x);

// torch::adaptive_avg_pool2d(x, {height, width}) (-1: the input's own size): GlobalAveragePool for
// 1x1, else an AveragePool whose window divides the input's static size; a size that does not divide
// is a stoker::Error naming both.
std::string onnx_adaptive_avg_pool2d(OnnxExport& e, const std::string& x, int64_t height, int64_t width);

// torch::layer_norm over the last dimension of `x`, with the initializers `weight` and `bias`:
// LayerNormalization from opset 17, before it the same from ReduceMean, Sub, Mul, Sqrt and Div.
std::string onnx_layer_norm(OnnxExport& e, const std::string& x, const std::string& weight, const std::string& bias,
                            double eps);
// torch::gelu (exact, by the error function): 0.5 * x * (1 + erf(x / sqrt(2))).
std::string onnx_gelu(OnnxExport& e, const std::string& x);
// torch::hardswish: x * HardSigmoid(x) with torch's slope 1/6 and offset 0.5.
std::string onnx_hardswish(OnnxExport& e, const std::string& x);
// A scalar float32 constant of the module being exported (`name` unique within it).
std::string onnx_scalar(OnnxExport& e, const std::string& name, double value);
// A 1-D int64 constant (a shape, an axis list, an index) of the module being exported.
std::string onnx_ints(OnnxExport& e, const std::string& name, const std::vector<int64_t>& values);

}  // namespace stoker::models::onnx
