// The process-wide ONNX exporter registry (models/onnx_registry.h) and the registration of every
// module type Stoker ships.
#include "models/onnx_registry.h"

#include <torch/torch.h>

#include "models/blocks.h"
#include "models/cifar_resnet.h"
#include "models/compact_resnet.h"
#include "models/convnext.h"
#include "models/efficientnet.h"
#include "models/mlp.h"
#include "models/mobile_blocks.h"
#include "models/mobilenet_v3.h"
#include "models/onnx_nn.h"
#include "models/resnet.h"
#include "models/vit.h"

namespace stoker::models {
namespace {

// One line per module type: libtorch's modules (models/onnx_nn.h), then the exporter beside each of
// Stoker's. A new model family adds its modules' lines here.
void add_stoker_exporters(Registry<OnnxExporter>& r) {
  add_torch_nn_exporters(r);
  add_onnx_exporter<BasicBlockImpl>(r, &basic_block_to_onnx);
  add_onnx_exporter<BottleneckImpl>(r, &bottleneck_to_onnx);
  add_onnx_exporter<ResNetImpl>(r, &resnet_to_onnx);
  add_onnx_exporter<CifarResNetImpl>(r, &cifar_resnet_to_onnx);
  add_onnx_exporter<CompactResNetImpl>(r, &compact_resnet_to_onnx);
  add_onnx_exporter<MlpImpl>(r, &mlp_to_onnx);
  add_onnx_exporter<ConvNormActivationImpl>(r, &conv_norm_activation_to_onnx);
  add_onnx_exporter<SqueezeExcitationImpl>(r, &squeeze_excitation_to_onnx);
  add_onnx_exporter<InvertedResidualImpl>(r, &inverted_residual_to_onnx);
  add_onnx_exporter<EfficientNetImpl>(r, &efficientnet_to_onnx);
  add_onnx_exporter<MobileNetV3Impl>(r, &mobilenet_v3_to_onnx);
  add_onnx_exporter<LayerNorm2dImpl>(r, &layer_norm2d_to_onnx);
  add_onnx_exporter<CNBlockImpl>(r, &cn_block_to_onnx);
  add_onnx_exporter<ConvNextImpl>(r, &convnext_to_onnx);
  add_onnx_exporter<SelfAttentionImpl>(r, &self_attention_to_onnx);
  add_onnx_exporter<EncoderBlockImpl>(r, &encoder_block_to_onnx);
  add_onnx_exporter<EncoderImpl>(r, &encoder_to_onnx);
  add_onnx_exporter<VisionTransformerImpl>(r, &vit_to_onnx);
}

}  // namespace

Registry<OnnxExporter>& onnx_exporter_registry() {
  return lazy_registry<OnnxExporter, add_stoker_exporters>("ONNX exporter");
}

}  // namespace stoker::models
