// ONNX export of module trees (models/onnx/export.h), checked with ONNX's own classes (no runtime:
// tests/recipe/export_onnx_test.cpp runs the files in ONNX Runtime): every registered model exports
// to a graph ONNX's checker accepts, with its batch norms folded and its output shape; the options
// (opset, batch, normalisation, float16, metadata) show in the file; a module type without an
// exporter is an error that names it and how to register one, after which it exports.
#include "models/onnx/export.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "models/onnx/proto.h"
#include "models/registry.h"
#include "test_util.h"

namespace stoker::models::onnx {
namespace {

OnnxExportOptions options_for(int64_t channels, int64_t size) {
  OnnxExportOptions o;
  o.what = "the test model";
  o.input_chw = {channels, size, size};
  o.num_classes = 10;
  return o;
}

TEST(OnnxExport, EveryStokerModelExportsACheckedGraphWithItsBatchNormsFolded) {
  torch::manual_seed(2);
  for (const std::string type : {"compact_resnet", "mlp", "cifar_resnet20", "cifar_resnet56", "resnet18", "resnet34",
                                  "resnet50", "resnet101"}) {
    SCOPED_TRACE(type);
    torch::nn::AnyModule model = create_model(model_options(type), ModelShape{3, 10});
    int64_t batch_norms = 0, convs = 0;
    for (const auto& m : model.ptr()->modules()) {
      batch_norms += m->as<torch::nn::BatchNorm2d>() != nullptr;
      convs += m->as<torch::nn::Conv2d>() != nullptr;
    }
    int64_t folded = -1;
    const std::string bytes = export_onnx(*model.ptr(), options_for(3, 32), onnx_exporter_registry(), &folded);
    const OnnxModelSummary s = read_onnx_model(bytes, type);
    EXPECT_EQ(folded, batch_norms);
    EXPECT_EQ(s.count("BatchNormalization"), 0);
    EXPECT_EQ(s.count("Conv"), convs);
    EXPECT_EQ(s.opset, 17);
    EXPECT_EQ(s.producer_name, "stoker");
    ASSERT_EQ(s.inputs.size(), 1u);
    EXPECT_EQ(s.inputs[0].name, "input");
    EXPECT_EQ(s.inputs[0].dims, (std::vector<int64_t>{1, 3, 32, 32}));
    ASSERT_EQ(s.outputs.size(), 1u);
    EXPECT_EQ(s.outputs[0].name, "logits");
    EXPECT_EQ(s.outputs[0].dims, (std::vector<int64_t>{1, 10}));
    EXPECT_EQ(s.ops.back(), "Gemm") << "the classifier last";
    EXPECT_TRUE(model.ptr()->is_training()) << "the model's mode is given back";
  }
}

TEST(OnnxExport, InitializersCarryTheStateDictNames) {
  torch::nn::AnyModule model = create_model(model_options("resnet18"), ModelShape{3, 10});
  const OnnxModelSummary s =
      read_onnx_model(export_onnx(*model.ptr(), options_for(3, 32), onnx_exporter_registry()), "resnet18");
  std::set<std::string> names;
  for (const auto& [name, type] : s.initializers) {
    names.insert(name);
    EXPECT_EQ(type, torch::kFloat32) << name;
  }
  // The convolutions' weights with their batch norms folded in, and the biases folding made.
  for (const char* name : {"conv1.weight", "conv1.bias", "layer1.0.conv1.weight", "layer2.0.downsample.0.weight",
                           "layer2.0.downsample.0.bias", "fc.weight", "fc.bias"}) {
    EXPECT_TRUE(names.count(name)) << name;
  }
  EXPECT_FALSE(names.count("bn1.running_mean"));
}

TEST(OnnxExport, OptionsShowInTheFile) {
  torch::nn::AnyModule model = create_model(model_options("compact_resnet"), ModelShape{1, 10});
  OnnxExportOptions o = options_for(1, 28);
  o.opset = 13;
  o.dynamic_batch = true;
  o.mean = {0.286};
  o.std = {0.353};
  o.dtype = torch::kFloat16;
  o.metadata = {{"class_names", "[\"a\", \"b\"]"}, {"mean", "[0.286]"}};
  const OnnxModelSummary s = read_onnx_model(export_onnx(*model.ptr(), o, onnx_exporter_registry()), "compact_resnet");
  EXPECT_EQ(s.opset, 13);
  EXPECT_EQ(s.inputs[0].dims, (std::vector<int64_t>{-1, 1, 28, 28}));
  EXPECT_EQ(s.inputs[0].dtype, torch::kFloat32);
  EXPECT_EQ(s.outputs[0].dims, (std::vector<int64_t>{-1, 10}));
  EXPECT_EQ(s.outputs[0].dtype, torch::kFloat32);
  EXPECT_EQ(s.symbolic_dims, (std::vector<std::string>{"batch", "batch"}));
  // Normalisation in float32, then float16 throughout, float32 again at the end.
  ASSERT_GE(s.ops.size(), 4u);
  EXPECT_EQ(std::vector<std::string>(s.ops.begin(), s.ops.begin() + 3), (std::vector<std::string>{"Sub", "Div", "Cast"}));
  EXPECT_EQ(s.ops.back(), "Cast");
  for (const auto& [name, type] : s.initializers) {
    EXPECT_EQ(type, name.rfind("normalize.", 0) == 0 ? torch::kFloat32 : torch::kFloat16) << name;
  }
  EXPECT_EQ(s.metadata_value("class_names"), "[\"a\", \"b\"]");
  EXPECT_EQ(s.metadata_value("mean"), "[0.286]");
}

TEST(OnnxExport, BadOptionsAreClearErrors) {
  torch::nn::AnyModule model = create_model(model_options("mlp"), ModelShape{1, 10});
  OnnxExportOptions o = options_for(1, 28);
  o.opset = 12;
  const auto error_of_export = [&] {
    return testing::error_of([&] { export_onnx(*model.ptr(), o, onnx_exporter_registry()); });
  };
  EXPECT_CONTAINS(error_of_export(), "ONNX opset 12 is outside what Stoker writes: 13 to");
  o = options_for(1, 30);  // mlp pools to 4x4: 30 does not divide
  EXPECT_CONTAINS(error_of_export(), "an adaptive average pooling from 30x30 to 4x4 has windows of unequal sizes");
  o = options_for(1, 28);
  o.num_classes = 7;
  EXPECT_CONTAINS(error_of_export(), "gives outputs of shape [1, 10] where [1, 7] was expected");
}

// An application's own module type, unknown to the exporter.
struct ScaleByTwoImpl : torch::nn::Module {
  torch::Tensor forward(const torch::Tensor& x) { return x * 2; }
};
TORCH_MODULE(ScaleByTwo);

TEST(OnnxExport, AnUnknownModuleTypeNamesItselfAndHowToRegisterAnExporter) {
  torch::nn::Sequential model(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3)), ScaleByTwo(),
                              torch::nn::AdaptiveAvgPool2d(1), torch::nn::Flatten(), torch::nn::Linear(4, 10));
  const std::string error =
      testing::error_of([&] { export_onnx(*model, options_for(1, 8), onnx_exporter_registry()); });
  const std::string type = "stoker::models::onnx::(anonymous namespace)::ScaleByTwoImpl";
  EXPECT_CONTAINS(error, "the test model: its module '1' is a " + type + ", which has no ONNX exporter");
  EXPECT_CONTAINS(error, "stoker::models::register_onnx_exporter<" + type + ">(exporter)");
  EXPECT_CONTAINS(error, "docs/trainer.md");

  register_onnx_exporter<ScaleByTwoImpl>([](OnnxExport& e, const ScaleByTwoImpl&, const std::string& x) {
    return e.op("Mul", {x, e.constant("two", torch::tensor({2.0f}))});
  });
  const OnnxModelSummary s = read_onnx_model(export_onnx(*model, options_for(1, 8), onnx_exporter_registry()), "the test model");
  EXPECT_EQ(s.ops, (std::vector<std::string>{"Conv", "Mul", "GlobalAveragePool", "Flatten", "Gemm"}));
  EXPECT_CONTAINS(testing::error_of([&] {
                    register_onnx_exporter<ScaleByTwoImpl>(
                        [](OnnxExport&, const ScaleByTwoImpl&, const std::string& x) { return x; });
                  }),
                  "is already registered");
}

}  // namespace
}  // namespace stoker::models::onnx
