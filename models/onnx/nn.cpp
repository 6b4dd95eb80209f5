// The ONNX exporters of libtorch's modules (models/onnx/nn.h).
#include "models/onnx/nn.h"

#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include "common/error.h"

namespace stoker::models::onnx {
namespace nn = torch::nn;
namespace {

std::vector<int64_t> pair_of(const torch::ExpandingArray<2>& a) { return {(*a)[0], (*a)[1]}; }

// ONNX's pads, [top, left, bottom, right], of a symmetric torch padding.
std::vector<int64_t> pads_of(const torch::ExpandingArray<2>& a) { return {(*a)[0], (*a)[1], (*a)[0], (*a)[1]}; }

std::string where(const OnnxExport& e) { return e.path().empty() ? "the model" : "'" + e.path() + "'"; }

std::vector<int64_t> conv_pads(const nn::detail::ConvNdOptions<2>& o) {
  if (const auto* explicit_pads = std::get_if<torch::ExpandingArray<2>>(&o.padding())) return pads_of(*explicit_pads);
  if (std::holds_alternative<torch::enumtype::kValid>(o.padding())) return {0, 0, 0, 0};
  // padding 'same' (stride 1): the total dilation * (kernel - 1), the odd pixel at the end, as torch.
  std::vector<int64_t> begin, end;
  for (size_t i = 0; i < 2; ++i) {
    const int64_t total = (*o.dilation())[i] * ((*o.kernel_size())[i] - 1);
    begin.push_back(total / 2);
    end.push_back(total - total / 2);
  }
  return {begin[0], begin[1], end[0], end[1]};
}

std::string conv2d(OnnxExport& e, const nn::Conv2dImpl& conv, const std::string& x) {
  const nn::detail::ConvNdOptions<2>& o = conv.options;
  STOKER_CHECK(std::holds_alternative<torch::enumtype::kZeros>(o.padding_mode()),
               "{}: a Conv2d padded other than with zeros (padding_mode {}) has no ONNX exporter in Stoker", where(e),
               torch::enumtype::get_enum_name(o.padding_mode()));
  std::vector<std::string> inputs = {x, e.param("weight")};
  if (o.bias()) inputs.push_back(e.param("bias"));
  return e.op("Conv", inputs,
              {{"kernel_shape", pair_of(o.kernel_size())},
               {"strides", pair_of(o.stride())},
               {"pads", conv_pads(o)},
               {"dilations", pair_of(o.dilation())},
               {"group", o.groups()}});
}

std::string batch_norm2d(OnnxExport& e, const nn::BatchNorm2dImpl& bn, const std::string& x) {
  const nn::BatchNormOptions& o = bn.options;
  STOKER_CHECK(o.track_running_stats(),
               "{}: a BatchNorm2d without running statistics (track_running_stats false) normalises each batch by "
               "itself even in eval mode, which an ONNX BatchNormalization cannot do",
               where(e));
  const int64_t c = o.num_features();
  const std::string scale = o.affine() ? e.param("weight") : e.constant("weight", torch::ones({c}));
  const std::string shift = o.affine() ? e.param("bias") : e.constant("bias", torch::zeros({c}));
  return e.op("BatchNormalization", {x, scale, shift, e.param("running_mean"), e.param("running_var")},
              {{"epsilon", o.eps()}});
}

std::string linear(OnnxExport& e, const nn::LinearImpl& fc, const std::string& x) {
  const bool bias = fc.options.bias();
  if (e.shape(x).size() == 2) {
    std::vector<std::string> inputs = {x, e.param("weight")};
    if (bias) inputs.push_back(e.param("bias"));
    return e.op("Gemm", inputs, {{"transB", int64_t{1}}});
  }
  // [..., in] @ [in, out] (+ bias) for inputs of higher rank (a sequence of tokens).
  const std::string y = e.op("MatMul", {x, e.constant("weight_t", fc.weight.t().contiguous())});
  return bias ? e.op("Add", {y, e.param("bias")}) : y;
}

std::string max_pool2d(OnnxExport& e, const nn::MaxPool2dImpl& pool, const std::string& x) {
  const nn::MaxPool2dOptions& o = pool.options;
  return e.op("MaxPool", {x},
              {{"kernel_shape", pair_of(o.kernel_size())},
               {"strides", pair_of(o.stride())},
               {"pads", pads_of(o.padding())},
               {"dilations", pair_of(o.dilation())},
               {"ceil_mode", int64_t{o.ceil_mode() ? 1 : 0}}});
}

std::string avg_pool2d(OnnxExport& e, const nn::AvgPool2dImpl& pool, const std::string& x) {
  const nn::AvgPool2dOptions& o = pool.options;
  STOKER_CHECK(!o.divisor_override().has_value(), "{}: an AvgPool2d with divisor_override has no ONNX exporter in Stoker",
               where(e));
  return e.op("AveragePool", {x},
              {{"kernel_shape", pair_of(o.kernel_size())},
               {"strides", pair_of(o.stride())},
               {"pads", pads_of(o.padding())},
               {"ceil_mode", int64_t{o.ceil_mode() ? 1 : 0}},
               {"count_include_pad", int64_t{o.count_include_pad() ? 1 : 0}}});
}

std::string adaptive_avg_pool2d(OnnxExport& e, const nn::AdaptiveAvgPool2dImpl& pool, const std::string& x) {
  const auto& size = *pool.options.output_size();
  return onnx_adaptive_avg_pool2d(e, x, size[0].value_or(-1), size[1].value_or(-1));
}

std::string flatten(OnnxExport& e, const nn::FlattenImpl& f, const std::string& x) {
  const int64_t rank = static_cast<int64_t>(e.shape(x).size());
  const int64_t end = f.options.end_dim() < 0 ? f.options.end_dim() + rank : f.options.end_dim();
  STOKER_CHECK(f.options.start_dim() == 1 && end == rank - 1,
               "{}: Stoker's ONNX exporter writes Flatten(start_dim=1, end_dim=-1) only, not start_dim {}, end_dim {}",
               where(e), f.options.start_dim(), f.options.end_dim());
  return onnx_flatten(e, x);
}

}  // namespace

std::string onnx_flatten(OnnxExport& e, const std::string& x) { return e.op("Flatten", {x}, {{"axis", int64_t{1}}}); }

std::string onnx_adaptive_avg_pool2d(OnnxExport& e, const std::string& x, int64_t height, int64_t width) {
  if (height == 1 && width == 1) return e.op("GlobalAveragePool", {x});
  const std::vector<int64_t> dims = e.shape(x);
  STOKER_CHECK(dims.size() == 4 && dims[2] > 0 && dims[3] > 0,
               "{}: an adaptive average pooling needs its input's static size, but ONNX's shape inference gives [{}]",
               where(e), fmt::join(dims, ", "));
  const int64_t h = height < 0 ? dims[2] : height, w = width < 0 ? dims[3] : width;
  STOKER_CHECK(dims[2] % h == 0 && dims[3] % w == 0,
               "{}: an adaptive average pooling from {}x{} to {}x{} has windows of unequal sizes, which no ONNX "
               "AveragePool computes; use an input size whose pooled size divides it (--input-size)",
               where(e), dims[2], dims[3], h, w);
  const std::vector<int64_t> window = {dims[2] / h, dims[3] / w};
  return e.op("AveragePool", {x}, {{"kernel_shape", window}, {"strides", window}});
}

std::string onnx_scalar(OnnxExport& e, const std::string& name, double value) {
  return e.constant(name, torch::tensor(static_cast<float>(value)));
}

std::string onnx_ints(OnnxExport& e, const std::string& name, const std::vector<int64_t>& values) {
  return e.constant(name, torch::tensor(values, torch::kInt64));
}

std::string onnx_layer_norm(OnnxExport& e, const std::string& x, const std::string& weight, const std::string& bias,
                            double eps) {
  if (e.opset() >= 17) {
    return e.op("LayerNormalization", {x, weight, bias}, {{"axis", int64_t{-1}}, {"epsilon", eps}});
  }
  const std::vector<int64_t> last = {-1};
  const std::string centred = e.op("Sub", {x, e.op("ReduceMean", {x}, {{"axes", last}})});
  const std::string variance = e.op("ReduceMean", {e.op("Mul", {centred, centred})}, {{"axes", last}});
  const std::string deviation = e.op("Sqrt", {e.op("Add", {variance, onnx_scalar(e, "eps", eps)})});
  return e.op("Add", {e.op("Mul", {e.op("Div", {centred, deviation}), weight}), bias});
}

std::string onnx_gelu(OnnxExport& e, const std::string& x) {
  const std::string erf = e.op("Erf", {e.op("Div", {x, onnx_scalar(e, "sqrt2", std::sqrt(2.0))})});
  const std::string one_plus = e.op("Add", {erf, onnx_scalar(e, "one", 1.0)});
  return e.op("Mul", {e.op("Mul", {x, onnx_scalar(e, "half", 0.5)}), one_plus});
}

std::string onnx_hardswish(OnnxExport& e, const std::string& x) {
  return e.op("Mul", {x, e.op("HardSigmoid", {x}, {{"alpha", 1.0 / 6.0}, {"beta", 0.5}})});
}

namespace {

std::string layer_norm(OnnxExport& e, const nn::LayerNormImpl& norm, const std::string& x) {
  const nn::LayerNormOptions& o = norm.options;
  STOKER_CHECK(o.normalized_shape().size() == 1 && o.elementwise_affine(),
               "{}: a LayerNorm over more than the last dimension, or without weight and bias, has no ONNX exporter "
               "in Stoker",
               where(e));
  return onnx_layer_norm(e, x, e.param("weight"), e.param("bias"), o.eps());
}

std::string gelu(OnnxExport& e, const nn::GELUImpl& g, const std::string& x) {
  STOKER_CHECK(g.options.approximate() == "none", "{}: a GELU with approximate '{}' has no ONNX exporter in Stoker "
               "(the exact one has)", where(e), g.options.approximate());
  return onnx_gelu(e, x);
}

}  // namespace

std::string onnx_batch_norm2d(OnnxExport& e, const torch::nn::BatchNorm2dImpl& bn, const std::string& x) {
  return batch_norm2d(e, bn, x);
}

void add_torch_nn_exporters(Registry<OnnxExporter>& r) {
  add_onnx_exporter<nn::Conv2dImpl>(r, &conv2d);
  add_onnx_exporter<nn::BatchNorm2dImpl>(r, &batch_norm2d);
  add_onnx_exporter<nn::LinearImpl>(r, &linear);
  add_onnx_exporter<nn::MaxPool2dImpl>(r, &max_pool2d);
  add_onnx_exporter<nn::AvgPool2dImpl>(r, &avg_pool2d);
  add_onnx_exporter<nn::AdaptiveAvgPool2dImpl>(r, &adaptive_avg_pool2d);
  add_onnx_exporter<nn::FlattenImpl>(r, &flatten);
  add_onnx_exporter<nn::ReLUImpl>(r, [](OnnxExport& e, const nn::ReLUImpl&, const std::string& x) {
    return e.op("Relu", {x});
  });
  // The identity in eval mode.
  const auto identity = [](OnnxExport&, const nn::Module&, const std::string& x) { return x; };
  add_onnx_exporter<nn::DropoutImpl>(r, identity);
  add_onnx_exporter<nn::Dropout2dImpl>(r, identity);
  add_onnx_exporter<nn::IdentityImpl>(r, identity);
  add_onnx_exporter<nn::SequentialImpl>(r, [](OnnxExport& e, const nn::SequentialImpl& s, const std::string& x) {
    return e.children(s, x);
  });
  // A ModuleList has no forward of its own: a parent's exporter that hands one on whole (e.child) runs
  // its entries in order, as the families whose features are a ModuleList do (ConvNeXt, EfficientNet).
  add_onnx_exporter<nn::ModuleListImpl>(r, [](OnnxExport& e, const nn::ModuleListImpl& l, const std::string& x) {
    return e.children(l, x);
  });
  add_onnx_exporter<nn::LayerNormImpl>(r, &layer_norm);
  add_onnx_exporter<nn::GELUImpl>(r, &gelu);
}

}  // namespace stoker::models::onnx
