// torchvision-compatible Vision Transformers (models/vit.h).
#include "models/vit.h"

#include <cmath>
#include <map>
#include <optional>

#include <fmt/ranges.h>
#include <torch/torch.h>

#include "common/error.h"
#include "models/blocks.h"
#include "models/init.h"
#include "models/onnx/export.h"
#include "models/onnx/nn.h"
#include "models/registry.h"
#include "models/timm.h"

namespace stoker::models {
namespace nn = torch::nn;

// ---- options --------------------------------------------------------------------------------------

std::optional<VitConfig> named_vit(const std::string& name) {
  // torchvision.models.vit_b_16 / vit_b_32 / vit_l_16: patch, layers, heads, width, MLP width.
  if (name == "vit_b_16") return VitConfig{name, 16, 12, 12, 768, 3072};
  if (name == "vit_b_32") return VitConfig{name, 32, 12, 12, 768, 3072};
  if (name == "vit_l_16") return VitConfig{name, 16, 24, 16, 1024, 4096};
  return std::nullopt;
}

namespace {
void visit_training_keys(OptionsVisitor& v, VitConfig& c) {
  v.field("image_size", c.image_size, rules::non_negative());
  v.field("dropout", c.dropout, rules::unit_open());
  v.field("attention_dropout", c.attention_dropout, rules::unit_open());
  v.field("drop_path_rate", c.drop_path_rate, rules::unit_open());
}

void check_config(const VitConfig& c) {
  if (c.hidden_dim % c.num_heads != 0) {
    STOKER_FAIL("hidden_dim {} is not a multiple of num_heads {}; each head takes hidden_dim / num_heads "
                "dimensions",
                c.hidden_dim, c.num_heads);
  }
  if (c.image_size > 0 && c.image_size % c.patch_size != 0) {
    STOKER_FAIL("image_size {} is not a multiple of the patch size {}", c.image_size, c.patch_size);
  }
}
}  // namespace

void VitOptions::visit(OptionsVisitor& v) { visit_training_keys(v, config); }
void VitOptions::check() const { check_config(config); }

void VitCustomOptions::visit(OptionsVisitor& v) {
  v.field("patch_size", config.patch_size, rules::at_least(1));
  v.field("num_layers", config.num_layers, rules::at_least(1));
  v.field("num_heads", config.num_heads, rules::at_least(1));
  v.field("hidden_dim", config.hidden_dim, rules::at_least(1));
  v.field("mlp_dim", config.mlp_dim, rules::at_least(1));
  visit_training_keys(v, config);
}
void VitCustomOptions::check() const { check_config(config); }

// ---- position embedding ----------------------------------------------------------------------------

torch::Tensor resize_position_embedding(const torch::Tensor& pos_embedding, std::array<int64_t, 2> new_grid,
                                        std::optional<std::array<int64_t, 2>> old_grid, int64_t prefix_tokens) {
  STOKER_CHECK(pos_embedding.dim() == 3 && pos_embedding.size(0) == 1,
               "a position embedding is [1, tokens, dim], got {}", fmt::join(pos_embedding.sizes(), "x"));
  STOKER_CHECK(new_grid[0] > 0 && new_grid[1] > 0 && prefix_tokens >= 0,
               "resizing a position embedding needs a positive grid, got {}x{}", new_grid[0], new_grid[1]);
  const int64_t tokens = pos_embedding.size(1), patches = tokens - prefix_tokens;
  if (!old_grid) {
    const auto side = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(std::max<int64_t>(patches, 0)))));
    STOKER_CHECK(side * side == patches,
                 "the position embedding has {} patch tokens (after {} prefix token(s)), not a square grid; give "
                 "its grid",
                 patches, prefix_tokens);
    old_grid = std::array<int64_t, 2>{side, side};
  }
  const auto [old_h, old_w] = *old_grid;
  STOKER_CHECK(old_h * old_w == patches, "a {}x{} grid has {} patches, but the position embedding has {} after {} "
               "prefix token(s)", old_h, old_w, old_h * old_w, patches, prefix_tokens);
  if (*old_grid == new_grid) return pos_embedding;
  const int64_t dim = pos_embedding.size(2);
  const torch::Tensor prefix = pos_embedding.narrow(1, 0, prefix_tokens);
  torch::Tensor grid = pos_embedding.narrow(1, prefix_tokens, patches).to(torch::kFloat32);
  grid = grid.reshape({1, old_h, old_w, dim}).permute({0, 3, 1, 2});
  grid = nn::functional::interpolate(grid, nn::functional::InterpolateFuncOptions()
                                               .size(std::vector<int64_t>{new_grid[0], new_grid[1]})
                                               .mode(torch::kBicubic)
                                               .align_corners(false)
                                               .antialias(true));
  grid = grid.permute({0, 2, 3, 1}).reshape({1, new_grid[0] * new_grid[1], dim}).to(pos_embedding.scalar_type());
  return torch::cat({prefix, grid}, 1);
}

// ---- modules ----------------------------------------------------------------------------------------

SelfAttentionImpl::SelfAttentionImpl(int64_t dim, int64_t heads, double dropout) : heads_(heads), dropout_(dropout) {
  // nn.MultiheadAttention._reset_parameters: Xavier-uniform in_proj_weight, zero biases; out_proj
  // keeps nn.Linear's default weight.
  in_proj_weight = register_parameter("in_proj_weight", torch::empty({3 * dim, dim}));
  in_proj_bias = register_parameter("in_proj_bias", torch::zeros({3 * dim}));
  out_proj = register_module("out_proj", nn::Linear(dim, dim));
  nn::init::xavier_uniform_(in_proj_weight);
  torch::NoGradGuard no_grad;
  out_proj->bias.zero_();
}

torch::Tensor SelfAttentionImpl::forward(const torch::Tensor& x) {
  const int64_t dim = x.size(2);
  // [N, L, 3 * dim] -> q, k, v as [N, heads, L, dim / heads] (views of the one product). N and L are
  // never read as numbers, so that a TorchScript trace keeps them free.
  const torch::Tensor qkv =
      torch::linear(x, in_proj_weight, in_proj_bias).unflatten(2, {3, heads_, dim / heads_}).permute({2, 0, 3, 1, 4});
  const torch::Tensor out =
      at::scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], {}, is_training() ? dropout_ : 0.0, false);
  return out_proj(out.transpose(1, 2).flatten(2));
}

EncoderBlockImpl::EncoderBlockImpl(const VitConfig& c, double drop_path_rate) : drop_path_(drop_path_rate) {
  ln_1 = register_module("ln_1", nn::LayerNorm(nn::LayerNormOptions({c.hidden_dim}).eps(1e-6)));
  self_attention = register_module("self_attention", SelfAttention(c.hidden_dim, c.num_heads, c.attention_dropout));
  dropout = register_module("dropout", nn::Dropout(c.dropout));
  ln_2 = register_module("ln_2", nn::LayerNorm(nn::LayerNormOptions({c.hidden_dim}).eps(1e-6)));
  // torchvision's MLPBlock (a torchvision.ops.MLP): 0 Linear, 1 GELU, 2 Dropout, 3 Linear, 4 Dropout;
  // Xavier-uniform weights, biases N(0, 1e-6^2).
  fc1 = nn::Linear(c.hidden_dim, c.mlp_dim);
  fc2 = nn::Linear(c.mlp_dim, c.hidden_dim);
  mlp_dropout = nn::Dropout(c.dropout);
  mlp = register_module("mlp", nn::Sequential(fc1, nn::GELU(), mlp_dropout, fc2, nn::Dropout(c.dropout)));
  torch::NoGradGuard no_grad;
  nn::init::xavier_uniform_(fc1->weight);
  nn::init::xavier_uniform_(fc2->weight);
  fc1->bias.normal_(0.0, 1e-6);
  fc2->bias.normal_(0.0, 1e-6);
}

torch::Tensor EncoderBlockImpl::forward(const torch::Tensor& input) {
  // model.activation_checkpointing: recomputed in backward when chosen (models/activation_checkpointing.h).
  return run_block(*this, input, [this](const torch::Tensor& in) {
    const bool training = is_training();
    torch::Tensor x = in + drop_path(dropout(self_attention(ln_1(in))), drop_path_, training);
    const torch::Tensor y = mlp_dropout(fc2(mlp_dropout(torch::gelu(fc1(ln_2(x))))));
    return x + drop_path(y, drop_path_, training);
  });
}

EncoderImpl::EncoderImpl(const VitConfig& c, std::array<int64_t, 2> grid) : grid_(grid) {
  const int64_t tokens = grid[0] * grid[1] + 1;  // the patches and the class token
  pos_embedding = register_parameter("pos_embedding", torch::empty({1, tokens, c.hidden_dim}));
  {
    torch::NoGradGuard no_grad;
    pos_embedding.normal_(0.0, 0.02);  // from BERT
  }
  dropout = register_module("dropout", nn::Dropout(c.dropout));
  layers = register_module("layers", nn::Sequential());
  const std::vector<double> rates = drop_path_rates(c.drop_path_rate, c.num_layers);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    blocks_.push_back(EncoderBlock(c, rates[static_cast<size_t>(i)]));
    layers->push_back(fmt::format("encoder_layer_{}", i), blocks_.back());
  }
  ln = register_module("ln", nn::LayerNorm(nn::LayerNormOptions({c.hidden_dim}).eps(1e-6)));
}

torch::Tensor EncoderImpl::forward(const torch::Tensor& x, std::array<int64_t, 2> grid) {
  const torch::Tensor pos = grid == grid_ ? pos_embedding : resize_position_embedding(pos_embedding, grid, grid_);
  torch::Tensor y = dropout(x + pos);
  for (EncoderBlock& block : blocks_) y = block(y);
  return ln(y);
}

std::array<int64_t, 2> VisionTransformerImpl::grid_of(int64_t height, int64_t width) const {
  const int64_t p = config_.patch_size;
  if (height % p != 0 || width % p != 0 || height < p || width < p) {
    STOKER_FAIL("model.type {}: the input is {}x{} pixels, not a multiple of the patch size {}; make the data's "
                "transforms end at a multiple of {} (a resize or crop), or choose another patch size",
                config_.name, height, width, p, p);
  }
  return {height / p, width / p};
}

VisionTransformerImpl::VisionTransformerImpl(const VitConfig& c, const ModelShape& shape) : config_(c) {
  check_config(c);
  STOKER_CHECK(shape.num_classes > 0 && shape.in_channels > 0,
               "model.type {} needs positive num_classes and in_channels, got {} and {}", c.name, shape.num_classes,
               shape.in_channels);
  const int64_t height = c.image_size > 0 ? c.image_size : shape.height;
  const int64_t width = c.image_size > 0 ? c.image_size : shape.width;
  if (height <= 0 || width <= 0) {
    STOKER_FAIL("model.type {} is built for one input size (its position embedding has one vector per patch), and "
                "the data's images vary in size; end data.train_transforms with a fixed-size crop, or set "
                "model.image_size",
                c.name);
  }
  grid_ = grid_of(height, width);
  const int64_t p = c.patch_size;
  conv_proj = register_module("conv_proj", nn::Conv2d(nn::Conv2dOptions(shape.in_channels, c.hidden_dim, p).stride(p)));
  class_token = register_parameter("class_token", torch::zeros({1, 1, c.hidden_dim}));
  encoder = register_module("encoder", Encoder(c, grid_));
  head = nn::Linear(c.hidden_dim, shape.num_classes);
  heads = register_module("heads", nn::Sequential());
  heads->push_back("head", head);
  // torchvision: the patchify stem truncated-normal with std sqrt(1 / fan_in), zero bias; a zero head.
  torch::NoGradGuard no_grad;
  trunc_normal_(conv_proj->weight, std::sqrt(1.0 / static_cast<double>(shape.in_channels * p * p)));
  conv_proj->bias.zero_();
  head->weight.zero_();
  head->bias.zero_();
}

torch::Tensor VisionTransformerImpl::forward(const torch::Tensor& x) {
  STOKER_CHECK(x.dim() == 4, "model.type {} takes image batches [N, C, H, W], got {}", config_.name,
               fmt::join(x.sizes(), "x"));
  const std::array<int64_t, 2> grid = grid_of(x.size(2), x.size(3));
  // [N, hidden, gh, gw] -> [N, gh * gw, hidden], patches in row-major order (as torchvision's reshape
  // and permute; without a copy when the convolution's output is channels-last).
  // No batch size is read as a number, so that a TorchScript trace keeps the batch dimension free.
  const torch::Tensor patches = conv_proj(x).permute({0, 2, 3, 1}).flatten(1, 2);
  // (Under autocast the concatenation promotes to the class token's float32, as in torchvision.)
  const torch::Tensor tokens = torch::cat({class_token.expand_as(patches.narrow(1, 0, 1)), patches}, 1);
  return head(encoder(tokens, grid).select(1, 0));
}

std::vector<LayerGroup> vit_layer_groups() {
  return {{"stem", {{"^class_token|conv_proj|encoder\\.pos_embedding"}}},
          {"blocks", {{"^encoder\\.layers\\.encoder_layer_(\\d+)\\."}, {"^encoder\\.ln\\.", {kMatchPrevious}}}}};
}

void resize_pretrained_position_embedding(const torch::nn::Module& model,
                                          std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
  const auto* vit = dynamic_cast<const VisionTransformerImpl*>(&model);
  if (vit == nullptr) return;
  const std::array<int64_t, 2> grid = vit->grid();
  for (auto& [key, value] : tensors) {
    if (key != "encoder.pos_embedding" || value.dim() != 3 || value.size(1) == grid[0] * grid[1] + 1) continue;
    value = resize_position_embedding(value, grid);
  }
}

std::string self_attention_to_onnx(onnx::OnnxExport& e, const SelfAttentionImpl& attention, const std::string& x) {
  const int64_t dim = attention.in_proj_weight.size(1), heads = attention.heads(), head_dim = dim / heads;
  // [N, L, dim] -> q, k, v as [N, heads, L, head_dim], then softmax(q k^T / sqrt(head_dim)) v.
  std::string qkv = e.op("MatMul", {x, e.constant("in_proj_weight_t", attention.in_proj_weight.t().contiguous())});
  qkv = e.op("Add", {qkv, e.param("in_proj_bias")});
  qkv = e.op("Reshape", {qkv, onnx_ints(e, "qkv_shape", {0, 0, 3, heads, head_dim})});
  qkv = e.op("Transpose", {qkv}, {{"perm", std::vector<int64_t>{2, 0, 3, 1, 4}}});
  const auto pick = [&](int64_t i) {
    return e.op("Gather", {qkv, e.constant("qkv_index", torch::tensor(i, torch::kInt64))}, {{"axis", int64_t{0}}});
  };
  const std::string q = e.op("Mul", {pick(0), onnx_scalar(e, "scale", 1.0 / std::sqrt(static_cast<double>(head_dim)))});
  const std::string k_t = e.op("Transpose", {pick(1)}, {{"perm", std::vector<int64_t>{0, 1, 3, 2}}});
  const std::string weights = e.op("Softmax", {e.op("MatMul", {q, k_t})}, {{"axis", int64_t{-1}}});
  std::string out = e.op("MatMul", {weights, pick(2)});
  out = e.op("Transpose", {out}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
  out = e.op("Reshape", {out, onnx_ints(e, "out_shape", {0, 0, dim})});
  return e.child(attention, "out_proj", out);
}

std::string encoder_block_to_onnx(onnx::OnnxExport& e, const EncoderBlockImpl& block, const std::string& x) {
  // Dropout and stochastic depth are the identity in eval mode.
  const std::string h = e.op("Add", {x, e.child(block, "self_attention", e.child(block, "ln_1", x))});
  return e.op("Add", {h, e.child(block, "mlp", e.child(block, "ln_2", h))});
}

std::string encoder_to_onnx(onnx::OnnxExport& e, const EncoderImpl& encoder, const std::string& x) {
  // The tokens of the grid the position embedding is for (vit_to_onnx checks the input size).
  const std::string y = e.op("Add", {x, e.param("pos_embedding")});
  return e.child(encoder, "ln", e.child(encoder, "layers", y));
}

std::string vit_to_onnx(onnx::OnnxExport& e, const VisionTransformerImpl& vit, const std::string& x) {
  const int64_t dim = vit.config().hidden_dim, patch = vit.config().patch_size;
  const std::vector<int64_t> dims = e.shape(x);
  const std::array<int64_t, 2> grid = vit.grid();
  STOKER_CHECK(dims.size() == 4 && dims[2] == grid[0] * patch && dims[3] == grid[1] * patch,
               "model.type {}: its position embedding is for {}x{} pixels and the export's input is {}x{}; export at "
               "the size the model was built for (--input-size {}x{})",
               vit.config().name, grid[0] * patch, grid[1] * patch, dims.size() == 4 ? dims[2] : -1,
               dims.size() == 4 ? dims[3] : -1, grid[0] * patch, grid[1] * patch);
  // [N, dim, gh, gw] -> [N, gh * gw, dim], patches in row-major order; the class token first.
  std::string patches = e.op("Transpose", {e.child(vit, "conv_proj", x)}, {{"perm", std::vector<int64_t>{0, 2, 3, 1}}});
  patches = e.op("Reshape", {patches, onnx_ints(e, "patches_shape", {0, -1, dim})});
  const std::string shape_of = e.op("Shape", {patches});
  const std::string batch = e.op("Slice", {shape_of, onnx_ints(e, "zero", {0}), onnx_ints(e, "one", {1})});
  const std::string shape = e.op("Concat", {batch, onnx_ints(e, "token_shape", {1, dim})}, {{"axis", int64_t{0}}});
  const std::string cls = e.op("Expand", {e.param("class_token"), shape});
  const std::string tokens = e.op("Concat", {cls, patches}, {{"axis", int64_t{1}}});
  const std::string encoded = e.child(vit, "encoder", tokens);
  const std::string cls_index = e.constant("cls_index", torch::tensor(int64_t{0}));
  const std::string first = e.op("Gather", {encoded, cls_index}, {{"axis", int64_t{1}}});
  return e.child(vit, "heads", first);
}

namespace {

// A ViT type: torchvision's named architecture (VitOptions) or the configurable one (VitCustomOptions);
// its image_size resolved from a square input; its head `heads`.
template <typename Options>
ModelType vit_type(const std::string& name) {
  ModelType type = model_type<Options>([name](const Options& o, const ModelShape& s) {
    VitConfig config = o.config;
    if (const std::optional<VitConfig> fixed = named_vit(name)) {
      config = *fixed;
      config.image_size = o.config.image_size;
      config.dropout = o.config.dropout;
      config.attention_dropout = o.config.attention_dropout;
      config.drop_path_rate = o.config.drop_path_rate;
    }
    config.name = name;
    return VisionTransformer(config, s);
  });
  type.resolve = [](TypeOptions& own, const ModelShape& s) {
    int64_t& image_size = dynamic_cast<Options&>(own).config.image_size;
    if (image_size == 0 && s.height > 0 && s.height == s.width) image_size = s.height;
  };
  // model.pretrained for another input size: its position embedding resized to the model's grid.
  type.adapt_pretrained = resize_pretrained_position_embedding;
  return type.with_head({"heads"}).with_layers(vit_layer_groups());
}

}  // namespace

namespace {

// timm's VisionTransformer names (torchvision's MultiheadAttention in_proj is timm's qkv, q, k, v stacked alike).
weights::TimmNamer vit_timm_names() {
  const std::string block = R"(encoder\.layers\.encoder_layer_(\d+)\.)";
  return weights::timm_rules({{"class_token", "cls_token"},
                              {R"(conv_proj\.(.*))", "patch_embed.proj.$1"},
                              {R"(encoder\.pos_embedding)", "pos_embed"},
                              {block + R"(ln_1\.(.*))", "blocks.$1.norm1.$2"},
                              {block + R"(ln_2\.(.*))", "blocks.$1.norm2.$2"},
                              {block + R"(self_attention\.in_proj_(weight|bias))", "blocks.$1.attn.qkv.$2"},
                              {block + R"(self_attention\.out_proj\.(.*))", "blocks.$1.attn.proj.$2"},
                              {block + R"(mlp\.0\.(.*))", "blocks.$1.mlp.fc1.$2"},
                              {block + R"(mlp\.3\.(.*))", "blocks.$1.mlp.fc2.$2"},
                              {R"(encoder\.ln\.(.*))", "norm.$1"},
                              {R"(heads\.head\.(.*))", "head.$1"}});
}

}  // namespace

// timm's ViTs with a class token, token pooling and biased qkv (its standard ones; LayerNorm eps 1e-6 and exact
// GELU as Stoker's), at 224 or 384 pixels (the position embedding is resized to the model's grid).
std::optional<weights::TimmDialect> vit_timm(const std::string& model_type) {
  const std::map<std::string, std::vector<std::string>> twins = {
      {"vit_b_16", {"vit_base_patch16_224", "vit_base_patch16_384"}},
      {"vit_b_32", {"vit_base_patch32_224", "vit_base_patch32_384"}},
      {"vit_l_16", {"vit_large_patch16_224", "vit_large_patch16_384"}},
      {"vit", {"vit_tiny_patch16_224", "vit_tiny_patch16_384", "vit_small_patch16_224", "vit_small_patch16_384",
               "vit_small_patch32_224", "vit_small_patch32_384", "vit_base_patch8_224", "vit_base_patch16_224",
               "vit_base_patch16_384", "vit_base_patch32_224", "vit_base_patch32_384", "vit_large_patch16_224",
               "vit_large_patch16_384"}}};
  const auto found = twins.find(model_type);
  if (found == twins.end()) return std::nullopt;
  weights::TimmDialect dialect = weights::make_timm_dialect("VisionTransformer", found->second, vit_timm_names());
  dialect.global_pool = "token";
  dialect.shape_args = {"embed_dim", "depth", "patch_size", "mlp_ratio"};
  // The heads: not in any shape, so compared with the model's.
  dialect.check_arg = [](const torch::nn::Module& model, const std::string& key, const std::string& value) -> std::string {
    if (key != "num_heads") return "Stoker's ViT is timm's default there";
    for (const auto& item : model.named_modules()) {
      const auto* attention = dynamic_cast<const SelfAttentionImpl*>(item.value().get());
      if (attention != nullptr && std::to_string(attention->heads()) != value) {
        return fmt::format("the model's attention has {} heads (model.num_heads)", attention->heads());
      }
    }
    return "";
  };
  return dialect;
}

// torchvision-compatible ViTs, named and configurable.
void register_vit(FamilyRegistrar& r) {
  for (const char* name : {"vit_b_16", "vit_b_32", "vit_l_16"}) r.model(name, vit_type<VitOptions>(name));
  r.model("vit", vit_type<VitCustomOptions>("vit"));
  r.exporter<SelfAttentionImpl>(&self_attention_to_onnx);
  r.exporter<EncoderBlockImpl>(&encoder_block_to_onnx);
  r.exporter<EncoderImpl>(&encoder_to_onnx);
  r.exporter<VisionTransformerImpl>(&vit_to_onnx);
}

}  // namespace stoker::models
