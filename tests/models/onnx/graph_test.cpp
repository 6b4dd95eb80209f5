// The graph passes (models/onnx/graph.h): a folded Conv computes what Conv then BatchNormalization
// computed (with and without the convolution's own bias, grouped too); what cannot fold is left
// alone; float16 conversion keeps what it is told to and refuses values beyond its range.
#include "models/onnx/graph.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "test_util.h"

namespace stoker::models::onnx {
namespace {

struct ConvBn {
  torch::Tensor weight, bias, gamma, beta, mean, var;
  int64_t groups = 1;
};

ConvBn random_conv_bn(int64_t in, int64_t out, int64_t groups, bool bias) {
  ConvBn p;
  p.weight = torch::randn({out, in / groups, 3, 3});
  if (bias) p.bias = torch::randn({out});
  p.gamma = torch::rand({out}) + 0.5;
  p.beta = torch::randn({out});
  p.mean = torch::randn({out});
  p.var = torch::rand({out}) + 0.1;
  p.groups = groups;
  return p;
}

// input -> Conv -> BatchNormalization -> output, as an exporter writes it.
OnnxGraph conv_bn_graph(const ConvBn& p) {
  OnnxGraph g;
  g.inputs.push_back({g.fresh_name("input"), torch::kFloat32, {-1, p.weight.size(1) * p.groups, 8, 8}});
  std::vector<std::string> conv_inputs = {"input", g.add_initializer("conv.weight", p.weight)};
  if (p.bias.defined()) conv_inputs.push_back(g.add_initializer("conv.bias", p.bias));
  const std::string y = g.add_node("Conv", "conv/Conv", conv_inputs, {{"group", p.groups}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}});
  const std::string z =
      g.add_node("BatchNormalization", "bn/BatchNormalization",
                 {y, g.add_initializer("bn.weight", p.gamma), g.add_initializer("bn.bias", p.beta),
                  g.add_initializer("bn.running_mean", p.mean), g.add_initializer("bn.running_var", p.var)},
                 {{"epsilon", 1e-3}});
  g.outputs.push_back({z, torch::kFloat32, {-1, p.weight.size(0), 8, 8}});
  return g;
}

torch::Tensor conv_then_bn(const ConvBn& p, const torch::Tensor& x) {
  const torch::Tensor y = torch::conv2d(x, p.weight, p.bias, 1, 1, 1, p.groups);
  return torch::batch_norm(y, p.gamma, p.beta, p.mean, p.var, false, 0.0, 1e-3, false);
}

TEST(OnnxGraph, FoldedConvEqualsConvThenBatchNorm) {
  torch::manual_seed(5);
  for (const bool bias : {false, true}) {
    for (const int64_t groups : {1, 4}) {
      SCOPED_TRACE(::testing::Message() << "bias " << bias << ", groups " << groups);
      const ConvBn p = random_conv_bn(8, 12, groups, bias);
      OnnxGraph g = conv_bn_graph(p);
      EXPECT_EQ(fold_batch_norms(g), 1);
      ASSERT_EQ(g.nodes.size(), 1u);
      const OnnxNode& conv = g.nodes[0];
      EXPECT_EQ(conv.op, "Conv");
      EXPECT_EQ(conv.outputs[0], g.outputs[0].name);  // the batch norm's output, read by the graph
      ASSERT_EQ(conv.inputs.size(), 3u);
      EXPECT_EQ(conv.inputs[2], "conv.bias");
      EXPECT_EQ(g.initializers().size(), 2u) << "the batch norm's tensors are gone";
      const torch::Tensor x = torch::randn({2, 8, 8, 8});
      const torch::Tensor folded = torch::conv2d(x, *g.initializer(conv.inputs[1]), *g.initializer(conv.inputs[2]), 1, 1,
                                                 1, groups);
      EXPECT_LE((folded - conv_then_bn(p, x)).abs().max().item<double>(), 1e-4);
    }
  }
}

TEST(OnnxGraph, WhatCannotFoldIsLeftAlone) {
  torch::manual_seed(6);
  const ConvBn p = random_conv_bn(4, 4, 1, false);
  // The convolution's output is also read elsewhere: folding would change that reader's input.
  OnnxGraph shared = conv_bn_graph(p);
  shared.add_node("Relu", "other/Relu", {shared.nodes[0].outputs[0]});
  EXPECT_EQ(fold_batch_norms(shared), 0);
  EXPECT_EQ(shared.nodes.size(), 3u);
  // A batch norm on the graph's input (no convolution before it).
  OnnxGraph alone = conv_bn_graph(p);
  alone.nodes[1].inputs[0] = "input";
  EXPECT_EQ(fold_batch_norms(alone), 0);
}

TEST(OnnxGraph, Float16KeepsWhatItIsToldAndRefusesOverflow) {
  OnnxGraph g;
  const std::string w = g.add_initializer("w", torch::full({3}, 2.5));
  const std::string m = g.add_initializer("normalize.mean", torch::full({3}, 0.1));
  const std::string i = g.add_initializer("shape", torch::tensor({1, -1}, torch::kInt64));
  to_float16(g, {m});
  EXPECT_EQ(g.initializer(w)->scalar_type(), torch::kFloat16);
  EXPECT_EQ(g.initializer(m)->scalar_type(), torch::kFloat32);
  EXPECT_EQ(g.initializer(i)->scalar_type(), torch::kInt64);

  OnnxGraph big;
  big.add_initializer("layer1.0.conv1.weight", torch::tensor({1.0, 70000.0}).to(torch::kFloat32));
  const std::string error = testing::error_of([&] { to_float16(big, {}); });
  EXPECT_CONTAINS(error, "layer1.0.conv1.weight holds 70000, beyond float16's largest value");
  EXPECT_CONTAINS(error, "--dtype float32");
}

TEST(OnnxGraph, NamesStayUnique) {
  OnnxGraph g;
  EXPECT_EQ(g.fresh_name("x"), "x");
  EXPECT_EQ(g.fresh_name("x"), "x_1");
  EXPECT_EQ(g.add_node("Relu", "x", {"input"}), "x_2");
  EXPECT_EQ(g.add_initializer("x", torch::ones({1})), "x_3");
}

}  // namespace
}  // namespace stoker::models::onnx
