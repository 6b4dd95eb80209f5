#include "models/mlp.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "recipe/config.h"
#include "test_util.h"

namespace stoker::models {
namespace {

TEST(Mlp, PoolsFlattensAndClassifies) {
  MlpOptions o;
  o.hidden = {5, 7};
  o.pool = 2;
  Mlp net(o, ModelShape{3, 4});
  std::vector<std::string> names;
  for (const auto& p : net->named_parameters()) names.push_back(p.key());
  EXPECT_EQ(names, (std::vector<std::string>{"layers.fc0.weight", "layers.fc0.bias", "layers.fc1.weight",
                                             "layers.fc1.bias", "layers.classifier.weight",
                                             "layers.classifier.bias"}));
  EXPECT_EQ(net->named_parameters()["layers.fc0.weight"].sizes(), torch::IntArrayRef({5, 3 * 2 * 2}));
  // The same as pooling and the linear layers by hand.
  const torch::Tensor x = torch::randn({6, 3, 9, 10});
  const torch::Tensor out = net->forward(x);
  EXPECT_EQ(out.sizes(), torch::IntArrayRef({6, 4}));
  auto p = net->named_parameters();
  torch::Tensor h = torch::adaptive_avg_pool2d(x, {2, 2}).flatten(1);
  h = torch::relu(torch::linear(h, p["layers.fc0.weight"], p["layers.fc0.bias"]));
  h = torch::relu(torch::linear(h, p["layers.fc1.weight"], p["layers.fc1.bias"]));
  h = torch::linear(h, p["layers.classifier.weight"], p["layers.classifier.bias"]);
  EXPECT_TRUE(torch::allclose(out, h, 1e-5, 1e-6));
}

TEST(Mlp, ConfigKeys) {
  const Config c = parse_config("model: {type: mlp, hidden: [], pool: 1}\n", "x.yaml");
  auto model = create_model(c.model, {1, 3});
  EXPECT_EQ(model.ptr()->parameters().size(), 2u);  // the classifier alone
  EXPECT_CONTAINS(testing::error_of([] { parse_config("model: {type: mlp, pool: 0}\n", "x.yaml"); }), "model.pool");
}

}  // namespace
}  // namespace stoker::models
