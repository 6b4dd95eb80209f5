// models/layer_groups.h: the layers of a network for optimizer.layer_decay, as timm numbers them.
#include "models/layer_groups.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "golden/layer_decay_golden.h"
#include "models/registry.h"
#include "test_util.h"

namespace stoker::models {
namespace {

std::vector<std::string> names_of(torch::nn::Module& model) {
  std::vector<std::string> out;
  for (const auto& p : model.named_parameters()) out.push_back(p.key());
  return out;
}

// timm's param_groups_layer_decay for torchvision-named resnet18/50 (tests/golden/layer_decay_golden.py):
// the same layer for every parameter, so the same scale decay^(n - 1 - layer), and weight decay off for
// 1-D parameters.
TEST(LayerGroups, ResNetScalesEqualTimmsParamGroupsLayerDecay) {
  for (const golden::LayerDecayCase& c : golden::kLayerDecayCases) {
    SCOPED_TRACE(c.model);
    const ModelType type = model_registry().get(c.model);
    torch::nn::AnyModule model = type.create(*type.options(), {3, 10});
    const std::vector<std::string> names = names_of(*model.ptr());
    const std::vector<torch::Tensor> params = model.ptr()->parameters();
    ASSERT_EQ(names.size(), c.params.size());
    const LayerAssignment layers = assign_layers(names, type.layer_groups);
    EXPECT_EQ(layers.num_layers, c.layers);
    EXPECT_EQ(layers.layer_names.front(), "stem");
    EXPECT_EQ(layers.layer_names.back(), "head");
    for (size_t i = 0; i < names.size(); ++i) {
      ASSERT_EQ(names[i], c.params[i].name);
      const double scale = std::pow(c.layer_decay, static_cast<double>(layers.num_layers - 1 - layers.layer[i]));
      EXPECT_NEAR(scale, c.params[i].lr_scale, 1e-12 * c.params[i].lr_scale) << names[i];
      EXPECT_EQ(params[i].dim() > 1 ? c.weight_decay : 0.0, c.params[i].weight_decay) << names[i];
    }
  }
}

TEST(LayerGroups, CompactResNetAndMlpHaveAStemBlocksAndAHead) {
  const ModelType compact = model_registry().get("compact_resnet");
  torch::nn::AnyModule model = compact.create(*compact.options(), {1, 10});  // widths 16/32/64, a block each
  const std::vector<std::string> names = names_of(*model.ptr());
  const LayerAssignment a = assign_layers(names, compact.layer_groups);
  EXPECT_EQ(a.num_layers, 5);  // stem, three blocks, the classifier
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].rfind("features.stem_", 0) == 0) EXPECT_EQ(a.layer[i], 0) << names[i];
    if (names[i].rfind("features.stage2_block0.", 0) == 0) EXPECT_EQ(a.layer[i], 2) << names[i];
    if (names[i].rfind("classifier.", 0) == 0) EXPECT_EQ(a.layer[i], 4) << names[i];
  }
  const ModelType mlp = model_registry().get("mlp");
  torch::nn::AnyModule m = mlp.create(*mlp.options(), {1, 10});
  const LayerAssignment b = assign_layers(names_of(*m.ptr()), mlp.layer_groups);
  EXPECT_EQ(b.num_layers, 2);
  EXPECT_EQ(b.layer_names, (std::vector<std::string>{"hidden", "head"}));
}

// timm's rules: the key is (group, numbers captured..., suffix...), a shorter tuple sorts first, and a
// suffix of MATCH_PREV_GROUP joins the layer before (a ViT's final norm with its last block).
TEST(LayerGroups, NumbersOrderLayersAndMatchPreviousJoinsTheLayerBefore) {
  const std::vector<LayerGroup> vit = {
      {"stem", {{"^cls_token|pos_embed|patch_embed"}}},
      {"blocks", {{"^blocks\\.(\\d+)"}, {"^norm", {kMatchPrevious}}}},
  };
  const std::vector<std::string> names = {"cls_token", "patch_embed.proj.weight", "blocks.10.attn.qkv.weight",
                                          "blocks.2.mlp.fc1.weight", "norm.weight", "head.weight"};
  const LayerAssignment a = assign_layers(names, vit);
  EXPECT_EQ(a.layer, (std::vector<int64_t>{0, 0, 2, 1, 2, 3}));  // 2 before 10; norm with block 10
  EXPECT_EQ(a.num_layers, 4);
  // Without groups, one layer; a rule that does not compile is named.
  EXPECT_EQ(assign_layers(names, {}).num_layers, 1);
  EXPECT_CONTAINS(testing::error_of([&] { assign_layers(names, {{"bad", {{"^blocks\\.(\\d+"}}}}); }),
                  "layer group 'bad': the regular expression '^blocks\\.(\\d+' does not compile");
}

// The other families' groups number their layers as timm's group_matcher does for the same
// architecture: the stem first, one layer per block (a ConvNeXt's downsampling with its stage's first
// block, a ViT's final norm and an EfficientNet's head convolution with the last block), the head last.
TEST(LayerGroups, TheOtherFamiliesNumberTheirLayersAsTimm) {
  struct Case {
    const char* type;
    int64_t blocks;  // timm's blocks for this configuration
    std::vector<std::pair<std::string, std::string>> same_layer;
  };
  const std::vector<Case> cases = {
      {"vit", 6, {{"encoder.ln.weight", "encoder.layers.encoder_layer_5.ln_1.weight"}}},
      {"convnext", 6, {{"features.2.1.weight", "features.3.0.block.0.weight"}}},  // widths 32..256, depths 1/1/3/1
      {"efficientnet_b0", 16, {{"features.8.0.weight", "features.7.0.block.0.0.weight"}}},
      {"mobilenet_v3_small", 12, {}},  // 11 inverted residuals and the last convolution
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.type);
    const ModelType type = model_registry().get(c.type);
    torch::nn::AnyModule model = type.create(*type.options(), {3, 10, 32, 32});
    const std::vector<std::string> names = names_of(*model.ptr());
    const LayerAssignment layers = assign_layers(names, type.layer_groups);
    EXPECT_EQ(layers.num_layers, c.blocks + 2);
    EXPECT_EQ(layers.layer_names.front(), "stem");
    EXPECT_EQ(layers.layer_names.back(), "head");
    const auto layer_of = [&](const std::string& name) {
      const auto it = std::find(names.begin(), names.end(), name);
      EXPECT_NE(it, names.end()) << name;
      return it == names.end() ? -1 : layers.layer[static_cast<size_t>(it - names.begin())];
    };
    EXPECT_EQ(layer_of(names.front()), 0);
    EXPECT_EQ(layer_of(names.back()), layers.num_layers - 1);
    for (const auto& [a, b] : c.same_layer) EXPECT_EQ(layer_of(a), layer_of(b)) << a << " and " << b;
  }
}

}  // namespace
}  // namespace stoker::models
