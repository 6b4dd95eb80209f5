// The torchvision-compatible ViTs (models/vit.h): names, shapes and initialisation as torchvision's,
// logits and FLOPs against torchvision's checked in (tests/golden/vit_convnext_golden.h), the input
// size's rules, the position embedding's resizing against timm's, and, live through the venv's Python,
// weights both ways and the named models' parameter counts (the VitPython tests).
#include "models/vit.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "golden/vit_convnext_golden.h"
#include "models/flops.h"
#include "models/registry.h"
#include "models/torchvision_golden.h"
#include "recipe/config.h"
#include "test_util.h"

namespace stoker::models {
namespace {
using namespace testing;  // NOLINT: the shared golden helpers (models/torchvision_golden.h)
using stoker::testing::error_of;

// The golden's small ViT: 32x32 inputs, 8x8 patches (a 4x4 grid), 2 layers, 2 heads, width 32, MLP 64.
const char* kSmallVit = "{type: vit, patch_size: 8, num_layers: 2, num_heads: 2, hidden_dim: 32, mlp_dim: 64}";

torch::nn::AnyModule small_vit(int64_t size = 32, const std::string& extra = "") {
  std::string yaml = kSmallVit;
  if (!extra.empty()) yaml.insert(yaml.size() - 1, ", " + extra);
  return create_model(parse_config("model: " + yaml + "\n", "vit.yaml").model, {3, 10, size, size});
}

const golden::FamilyGolden& vit_golden() {
  for (const auto& g : golden::family_goldens()) {
    if (g.model.find("type: vit") != std::string::npos) return g;
  }
  throw std::runtime_error("no ViT in the golden header");
}

TEST(Vit, NamesAndShapesEqualTorchvisionsStateDictKeys) {
  torch::nn::AnyModule model = small_vit();
  const auto s = state_map(*model.ptr());
  EXPECT_EQ(s.size(), 32u);  // len(VisionTransformer(32, 8, 2, 2, 32, 64).state_dict())
  const std::map<std::string, std::vector<int64_t>> expected{
      {"class_token", {1, 1, 32}},
      {"conv_proj.weight", {32, 3, 8, 8}},
      {"conv_proj.bias", {32}},
      {"encoder.pos_embedding", {1, 17, 32}},
      {"encoder.layers.encoder_layer_0.ln_1.weight", {32}},
      {"encoder.layers.encoder_layer_0.self_attention.in_proj_weight", {96, 32}},
      {"encoder.layers.encoder_layer_0.self_attention.in_proj_bias", {96}},
      {"encoder.layers.encoder_layer_0.self_attention.out_proj.weight", {32, 32}},
      {"encoder.layers.encoder_layer_0.self_attention.out_proj.bias", {32}},
      {"encoder.layers.encoder_layer_1.ln_2.bias", {32}},
      {"encoder.layers.encoder_layer_1.mlp.0.weight", {64, 32}},
      {"encoder.layers.encoder_layer_1.mlp.3.weight", {32, 64}},
      {"encoder.layers.encoder_layer_1.mlp.3.bias", {32}},
      {"encoder.ln.weight", {32}},
      {"heads.head.weight", {10, 32}},
      {"heads.head.bias", {10}}};
  for (const auto& [key, shape] : expected) {
    ASSERT_TRUE(s.count(key)) << key;
    EXPECT_EQ(s.at(key).sizes(), shape) << key;
  }
  EXPECT_FALSE(s.count("encoder.layers.encoder_layer_2.ln_1.weight"));
}

TEST(Vit, NamedTypesHaveTorchvisionsArchitecture) {
  for (const auto& [name, patch, layers, heads, width, mlp] :
       std::vector<std::tuple<std::string, int64_t, int64_t, int64_t, int64_t, int64_t>>{
           {"vit_b_16", 16, 12, 12, 768, 3072}, {"vit_b_32", 32, 12, 12, 768, 3072}, {"vit_l_16", 16, 24, 16, 1024, 4096}}) {
    const std::optional<VitConfig> c = named_vit(name);
    ASSERT_TRUE(c) << name;
    EXPECT_EQ(std::make_tuple(c->patch_size, c->num_layers, c->num_heads, c->hidden_dim, c->mlp_dim),
              std::make_tuple(patch, layers, heads, width, mlp))
        << name;
  }
  // Built from the registry at 224x224 (the parameter counts are compared with torchvision's live, by
  // VitPython.ParameterCountsEqualTorchvisions): the grid follows the input.
  torch::nn::AnyModule b32 = create_model(model_options("vit_b_32"), {3, 1000, 224, 224});
  EXPECT_EQ(state_map(*b32.ptr()).at("encoder.pos_embedding").sizes(), (std::vector<int64_t>{1, 50, 768}));
  // The named types take only the training keys.
  EXPECT_NE(error_of([] { parse_config("model: {type: vit_b_16, patch_size: 8}\n", "r.yaml"); }).find("patch_size"),
            std::string::npos);
}

TEST(Vit, MatchesCheckedInTorchvisionLogitsAndFlops) { expect_matches_family_golden(vit_golden()); }

TEST(Vit, FlopsAreTheHandCount) {
  // Per sample: the patch projection, then per layer q/k/v, q k^T and weights x v over 2 heads, the
  // output projection and the MLP, then the head.
  const int64_t tokens = 17, d = 32, mlp = 64, patches = 16;
  const int64_t per_layer = tokens * d * 3 * d + 2 * tokens * tokens * d + tokens * d * d + 2 * tokens * d * mlp;
  const int64_t macs = patches * d * 3 * 8 * 8 + 2 * per_layer + d * 10;
  torch::nn::AnyModule model = small_vit();
  const FlopCount count = count_forward_flops(model, {3, 32, 32});
  EXPECT_DOUBLE_EQ(count.macs(), static_cast<double>(macs));
  EXPECT_EQ(count.convolutions, 1);
  EXPECT_EQ(count.matmuls, 2 * (4 + 2) + 1);  // per layer: in_proj, 2 attention products, out_proj, 2 MLP
}

TEST(Vit, InitialisedAsTorchvision) {
  torch::manual_seed(0);
  torch::nn::AnyModule model = create_model(model_options("vit_b_16"), {3, 1000, 224, 224});
  const auto s = state_map(*model.ptr());
  EXPECT_TRUE(s.at("class_token").eq(0).all().item<bool>());
  EXPECT_TRUE(s.at("heads.head.weight").eq(0).all().item<bool>());
  EXPECT_TRUE(s.at("heads.head.bias").eq(0).all().item<bool>());
  EXPECT_TRUE(s.at("conv_proj.bias").eq(0).all().item<bool>());
  EXPECT_NEAR(s.at("encoder.pos_embedding").std().item<double>(), 0.02, 0.001);
  // Truncated normal, std sqrt(1 / fan_in) (fan_in 3 * 16 * 16).
  EXPECT_NEAR(s.at("conv_proj.weight").std().item<double>(), std::sqrt(1.0 / 768), 0.001);
  const std::string block = "encoder.layers.encoder_layer_3.";
  EXPECT_TRUE(s.at(block + "self_attention.in_proj_bias").eq(0).all().item<bool>());
  EXPECT_TRUE(s.at(block + "self_attention.out_proj.bias").eq(0).all().item<bool>());
  // Xavier-uniform: bound sqrt(6 / (fan_in + fan_out)).
  EXPECT_LE(s.at(block + "self_attention.in_proj_weight").abs().max().item<double>(), std::sqrt(6.0 / (768 + 2304)) + 1e-6);
  EXPECT_LE(s.at(block + "mlp.0.weight").abs().max().item<double>(), std::sqrt(6.0 / (768 + 3072)) + 1e-6);
  EXPECT_GT(s.at(block + "mlp.0.weight").abs().max().item<double>(), 0.9 * std::sqrt(6.0 / (768 + 3072)));
  EXPECT_LT(s.at(block + "mlp.3.bias").abs().max().item<double>(), 1e-5);  // N(0, 1e-6^2)
  EXPECT_TRUE(s.at(block + "ln_1.weight").eq(1).all().item<bool>());
}

TEST(Vit, InputSizeRules) {
  // Not a multiple of the patch size: when built, and when given one.
  std::string e = error_of([] { small_vit(30); });
  EXPECT_NE(e.find("model.type vit: the input is 30x30 pixels, not a multiple of the patch size 8"), std::string::npos)
      << e;
  torch::nn::AnyModule model = small_vit();
  e = error_of([&] { model.forward(torch::zeros({1, 3, 36, 32})); });
  EXPECT_NE(e.find("model.type vit: the input is 36x32 pixels"), std::string::npos) << e;
  // Unknown size (images of varying size): a clear error, unless model.image_size says it.
  e = error_of([] { create_model(model_options("vit_b_16"), {3, 10, 0, 0}); });
  EXPECT_NE(e.find("model.type vit_b_16"), std::string::npos) << e;
  EXPECT_NE(e.find("model.image_size"), std::string::npos) << e;
  torch::nn::AnyModule sized = create_model(
      parse_config("model: {type: vit_b_32, image_size: 64}\n", "r.yaml").model, {3, 10, 0, 0});
  EXPECT_EQ(state_map(*sized.ptr()).at("encoder.pos_embedding").size(1), 5);
  EXPECT_THROW(parse_config("model: {type: vit, patch_size: 8, image_size: 20}\n", "r.yaml"), Error);
  EXPECT_THROW(parse_config("model: {type: vit, hidden_dim: 30, num_heads: 4}\n", "r.yaml"), Error);
  // A non-square input builds a non-square grid.
  torch::nn::AnyModule wide = create_model(parse_config(std::string("model: ") + kSmallVit + "\n", "r.yaml").model,
                                           {3, 10, 16, 40});
  EXPECT_EQ(state_map(*wide.ptr()).at("encoder.pos_embedding").size(1), 1 + 2 * 5);
  EXPECT_EQ(wide.forward(torch::randn({2, 3, 16, 40})).sizes(), (std::vector<int64_t>{2, 10}));
}

TEST(Vit, OtherInputSizesResizeThePositionEmbedding) {
  torch::manual_seed(3);
  torch::nn::AnyModule model = small_vit();
  golden_fill(*model.ptr());  // a non-zero head
  model.ptr()->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor at48 = model.forward(torch::randn({2, 3, 48, 48}));
  EXPECT_EQ(at48.sizes(), (std::vector<int64_t>{2, 10}));
  // The same as a model built for 48x48 whose embedding was resized once, as the pretrained loader does.
  torch::nn::AnyModule big = small_vit(48);
  auto from = state_map(*model.ptr());
  for (auto& [name, tensor] : state_map(*big.ptr())) {
    tensor.copy_(name == "encoder.pos_embedding" ? resize_position_embedding(from.at(name), {6, 6}) : from.at(name));
  }
  big.ptr()->eval();
  torch::manual_seed(4);
  const torch::Tensor x = torch::randn({2, 3, 48, 48});
  EXPECT_TRUE(torch::allclose(model.forward(x), big.forward(x), 1e-5, 1e-5));
}

TEST(Vit, ResizePositionEmbeddingEqualsTimms) {
  ASSERT_EQ(golden::resize_goldens().size(), 4u);
  for (const golden::ResizeGolden& g : golden::resize_goldens()) {
    SCOPED_TRACE(fmt::format("{}x{} -> {}x{}", g.old_grid[0], g.old_grid[1], g.new_grid[0], g.new_grid[1]));
    const int64_t tokens = 1 + g.old_grid[0] * g.old_grid[1];
    // resize_input() of the script: unit(n, name_key("pos_embedding")) in float32.
    const torch::Tensor pos = golden_unit(tokens * g.dim, "pos_embedding").to(torch::kFloat32).reshape({1, tokens, g.dim});
    const std::optional<std::array<int64_t, 2>> old_grid =
        g.old_grid_given ? std::optional<std::array<int64_t, 2>>({g.old_grid[0], g.old_grid[1]}) : std::nullopt;
    const torch::Tensor ours = resize_position_embedding(pos, {g.new_grid[0], g.new_grid[1]}, old_grid);
    const torch::Tensor expected = torch::tensor(g.resized, torch::kFloat64).reshape({1, -1, g.dim});
    ASSERT_EQ(ours.sizes(), expected.sizes());
    EXPECT_LE((ours.to(torch::kFloat64) - expected).abs().max().item<double>(), 1e-6);
    EXPECT_TRUE(torch::equal(ours.select(1, 0), pos.select(1, 0)));  // the class token kept
  }
  const torch::Tensor pos = torch::randn({1, 17, 4});
  EXPECT_TRUE(torch::equal(resize_position_embedding(pos, {4, 4}), pos));
  EXPECT_EQ(resize_position_embedding(pos.to(torch::kBFloat16), {2, 2}).scalar_type(), torch::kBFloat16);
  EXPECT_NE(error_of([] { resize_position_embedding(torch::zeros({1, 1 + 10, 4}), {3, 3}); }).find("not a square"),
            std::string::npos);
  EXPECT_NE(error_of([] { resize_position_embedding(torch::zeros({17, 4}), {3, 3}); }).find("[1, tokens, dim]"),
            std::string::npos);
}

TEST(Vit, ResolvedConfigRecordsTheImageSize) {
  TypedOptions model = parse_config(std::string("model: ") + kSmallVit + "\n", "r.yaml").model;
  resolve_model_options(model, {3, 10, 40, 48});  // not square: left to the data
  EXPECT_EQ(model.as<VitCustomOptions>().config.image_size, 0);
  resolve_model_options(model, {3, 10, 32, 32});
  EXPECT_EQ(model.as<VitCustomOptions>().config.image_size, 32);
  resolve_model_options(model, {3, 10, 64, 64});  // set: kept
  EXPECT_EQ(model.as<VitCustomOptions>().config.image_size, 32);
  TypedOptions resnet = model_options("resnet18");
  resolve_model_options(resnet, {3, 10, 32, 32});  // a type without a resolver: nothing
}

TEST(Vit, StochasticDepthAndDropoutOnlyInTraining) {
  torch::manual_seed(5);
  torch::nn::AnyModule plain = small_vit();
  torch::nn::AnyModule dropped = small_vit(32, "drop_path_rate: 0.3, dropout: 0.1, attention_dropout: 0.1");
  golden_fill(*plain.ptr());
  golden_fill(*dropped.ptr());
  int64_t blocks = 0;
  for (const auto& m : dropped.ptr()->modules(false)) {
    if (auto* b = m->as<EncoderBlockImpl>()) {
      EXPECT_DOUBLE_EQ(b->drop_path_rate(), blocks++ == 0 ? 0.0 : 0.3);  // linear over the 2 blocks
    }
  }
  EXPECT_EQ(blocks, 2);
  const torch::Tensor x = torch::randn({4, 3, 32, 32});
  torch::NoGradGuard no_grad;
  plain.ptr()->eval();
  dropped.ptr()->eval();
  EXPECT_TRUE(torch::allclose(plain.forward(x), dropped.forward(x)));
  dropped.ptr()->train();
  EXPECT_FALSE(torch::allclose(plain.forward(x), dropped.forward(x)));
}

// ---------------------------------------------------------------------------------------------
// Live, through the venv's Python (tests/golden/vit_convnext_golden.py make|check|count).

class VitPython : public FamilyPython {};

TEST_F(VitPython, LoadsTorchvisionWeightsAndMatchesItsLogits) {
  torch::nn::AnyModule model = small_vit();
  expect_loads_torchvision_weights(model, "vit");
}

TEST_F(VitPython, TorchvisionLoadsStokerWeightsAndMatchesOurLogits) {
  torch::nn::AnyModule model = small_vit();
  expect_torchvision_loads_ours(model, "vit");
}

// The named configurations' parameter counts equal torchvision's (built on the meta device there).
TEST_F(VitPython, ParameterCountsEqualTorchvisions) {
  const std::map<std::string, int64_t> torchvision = counts(run("count"));
  EXPECT_EQ(torchvision.at("vit_b_16"), 86'567'656);  // the script printed what it should
  for (const char* type : {"vit_b_16", "vit_b_32", "vit_l_16"}) {
    torch::nn::AnyModule model = create_model(model_options(type), {3, 1000, 224, 224});
    EXPECT_EQ(parameter_count(*model.ptr()), torchvision.at(type)) << type;
  }
}

}  // namespace
}  // namespace stoker::models
