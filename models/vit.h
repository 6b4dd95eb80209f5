// torchvision-compatible Vision Transformers (Dosovitskiy et al. 2020): vit_b_16, vit_b_32, vit_l_16
// and a configurable `vit`, and the resizing of a position embedding to another patch grid.
//
// The architecture is torchvision.models.vision_transformer's, module for module: `conv_proj` (a
// patch_size x patch_size convolution of stride patch_size), a learned `class_token`, `encoder`
// (`pos_embedding` added, dropout, `layers.encoder_layer_{i}` of pre-norm blocks, final `ln`) and
// `heads.head`. Each block: `ln_1`, `self_attention` with torch.nn.MultiheadAttention's parameters
// (`in_proj_weight`, `in_proj_bias`, `out_proj.weight`, `out_proj.bias`), dropout, `ln_2`, `mlp`
// (`mlp.0` Linear, GELU, dropout, `mlp.3` Linear, dropout). State-dict keys equal torchvision's, so
// weights move both ways (models/weights/state_dict.h). Attention runs through at::scaled_dot_product_attention
// (the fused flash / memory-efficient kernels on CUDA, the flash kernel on the CPU); its dropout only
// in training. Initialisation as torchvision's.
//
// The position embedding holds one vector per patch of the grid the model is built for (the data's
// input size, ModelShape, or model.image_size), plus the class token's. An input of another size
// that is a multiple of the patch size gets the embedding resized to its grid on the fly (bicubic, as
// timm's dynamic_img_size), so evaluation at data.eval_size and progressive resizing work; an input
// that is not a multiple is an error naming model.type and the size. Beyond torchvision: stochastic
// depth on both residual branches (model.drop_path_rate, linear over the blocks, as timm's ViT).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/options.h"
#include "models/activation_checkpointing.h"
#include "models/layer_groups.h"
#include "models/shape.h"

namespace stoker::models {

// Everything a VisionTransformer is built from.
struct VitConfig {
  std::string name = "vit";  // the model.type, for messages
  int64_t patch_size = 16, num_layers = 12, num_heads = 12, hidden_dim = 768, mlp_dim = 3072;
  int64_t image_size = 0;          // the square input it is built for; 0 = the data's (ModelShape)
  double dropout = 0.0;            // after the embedding, the attention and in the MLP
  double attention_dropout = 0.0;  // on the attention weights, in training
  double drop_path_rate = 0.0;     // stochastic depth, 0 to this over the blocks
};

// torchvision's named configurations: vit_b_16, vit_b_32, vit_l_16 (nullopt for another name).
std::optional<VitConfig> named_vit(const std::string& name);

// The keys of vit_b_16, vit_b_32 and vit_l_16 (their architecture is fixed): model.image_size,
// model.dropout, model.attention_dropout, model.drop_path_rate.
struct VitOptions : TypeOptionsOf<VitOptions> {
  VitConfig config;
  void visit(OptionsVisitor& v) override;
  void check() const override;
};

// The configurable `vit`'s keys: those above and the architecture (patch_size, num_layers, num_heads,
// hidden_dim, mlp_dim), by default a 6-layer ViT of width 192 on 4x4 patches, small enough to train
// on a CPU (CIFAR-sized inputs).
struct VitCustomOptions : TypeOptionsOf<VitCustomOptions> {
  VitConfig config{"vit", 4, 6, 3, 192, 768};
  void visit(OptionsVisitor& v) override;
  void check() const override;
};

// timm's resample_abs_pos_embed: a position embedding [1, prefix + old_h * old_w, D] made one for
// `new_grid` ({height, width} in patches) by bicubic, antialiased interpolation of its patch vectors in
// float32 (then back to its dtype), the `prefix_tokens` leading ones (the class token's) kept. The old
// grid is square unless given. The pretrained loader calls it when a checkpoint's grid differs from the
// model's. Errors name the shapes.
torch::Tensor resize_position_embedding(const torch::Tensor& pos_embedding, std::array<int64_t, 2> new_grid,
                                        std::optional<std::array<int64_t, 2>> old_grid = std::nullopt,
                                        int64_t prefix_tokens = 1);

namespace onnx { class OnnxExport; }  // models/onnx/export.h

// nn.MultiheadAttention(dim, heads, dropout, batch_first=True) called as self-attention (q = k = v,
// no mask, no weights returned), with its parameter names and initialisation; through
// at::scaled_dot_product_attention.
class SelfAttentionImpl : public torch::nn::Module {
 public:
  SelfAttentionImpl(int64_t dim, int64_t heads, double dropout);
  torch::Tensor forward(const torch::Tensor& x);  // [N, L, dim] -> [N, L, dim]
  int64_t heads() const { return heads_; }

  torch::Tensor in_proj_weight, in_proj_bias;
  torch::nn::Linear out_proj{nullptr};

 private:
  int64_t heads_;
  double dropout_;
};
TORCH_MODULE(SelfAttention);

// torchvision's EncoderBlock: x + attention(ln_1(x)), then + mlp(ln_2(.)), each branch through
// dropout and stochastic depth.
class EncoderBlockImpl : public torch::nn::Module, public CheckpointableBlock {
 public:
  EncoderBlockImpl(const VitConfig& config, double drop_path_rate);
  torch::Tensor forward(const torch::Tensor& x);
  double drop_path_rate() const { return drop_path_; }

 private:
  double drop_path_;
  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  SelfAttention self_attention{nullptr};
  torch::nn::Dropout dropout{nullptr};
  torch::nn::Sequential mlp{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};  // mlp.0 and mlp.3
  torch::nn::Dropout mlp_dropout{nullptr};
};
TORCH_MODULE(EncoderBlock);

// torchvision's Encoder: + pos_embedding (resized to `grid` when that is not the built one),
// dropout, the blocks, the final LayerNorm.
class EncoderImpl : public torch::nn::Module {
 public:
  EncoderImpl(const VitConfig& config, std::array<int64_t, 2> grid);
  torch::Tensor forward(const torch::Tensor& x, std::array<int64_t, 2> grid);

  torch::Tensor pos_embedding;

 private:
  std::array<int64_t, 2> grid_;
  torch::nn::Dropout dropout{nullptr};
  torch::nn::Sequential layers{nullptr};
  std::vector<EncoderBlock> blocks_;
  torch::nn::LayerNorm ln{nullptr};
};
TORCH_MODULE(Encoder);

class VisionTransformerImpl : public torch::nn::Module {
 public:
  // Built for the input size config.image_size (square) or, when 0, shape's height x width; an error
  // naming config.name when neither is known or the size is not a multiple of the patch size.
  VisionTransformerImpl(const VitConfig& config, const ModelShape& shape);
  torch::Tensor forward(const torch::Tensor& x);  // [N, C, H, W] -> [N, num_classes]

  const VitConfig& config() const { return config_; }
  // The patch grid the position embedding is for, {height, width}.
  std::array<int64_t, 2> grid() const { return grid_; }

 private:
  std::array<int64_t, 2> grid_of(int64_t height, int64_t width) const;

  VitConfig config_;
  std::array<int64_t, 2> grid_;
  torch::Tensor class_token;
  torch::nn::Conv2d conv_proj{nullptr};
  Encoder encoder{nullptr};
  torch::nn::Sequential heads{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(VisionTransformer);

// model.pretrained for a ViT (models/weights/pretrained.h PretrainedAdapter): a position embedding
// (encoder.pos_embedding) for another patch grid than `model`'s, a square one, resized to it with
// resize_position_embedding, as timm's checkpoint_filter_fn does. Nothing for another module.
void resize_pretrained_position_embedding(const torch::nn::Module& model,
                                          std::vector<std::pair<std::string, torch::Tensor>>& tensors);

// The ONNX exporters of the ViT modules (models/onnx/export.h): their eval-mode forwards, at the input
// size the position embedding is for (vit_to_onnx refuses another, saying so).
std::string self_attention_to_onnx(onnx::OnnxExport& e, const SelfAttentionImpl& attention, const std::string& x);
std::string encoder_block_to_onnx(onnx::OnnxExport& e, const EncoderBlockImpl& block, const std::string& x);
std::string encoder_to_onnx(onnx::OnnxExport& e, const EncoderImpl& encoder, const std::string& x);
std::string vit_to_onnx(onnx::OnnxExport& e, const VisionTransformerImpl& vit, const std::string& x);

// The layers of a torchvision-layout ViT for optimizer.layer_decay: timm's
// VisionTransformer.group_matcher in torchvision's names: the stem (class token, patch projection,
// position embedding), each encoder block, the final norm with the last block; then the head.
std::vector<LayerGroup> vit_layer_groups();

}  // namespace stoker::models
