// torchvision-compatible ResNets (models/resnet.h): the blocks, the network and its initialisation.
#include "models/resnet.h"

#include <torch/torch.h>

#include <utility>

#include "common/error.h"

namespace stoker::models {
namespace nn = torch::nn;

namespace {

nn::Conv2d conv3x3(int64_t in, int64_t out, int64_t stride) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}

nn::Conv2d conv1x1(int64_t in, int64_t out, int64_t stride) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Blocks

ResNetBasicBlockImpl::ResNetBasicBlockImpl(int64_t inplanes, int64_t planes, int64_t stride,
                                           nn::Sequential downsample_) {
  conv1 = register_module("conv1", conv3x3(inplanes, planes, stride));
  bn1 = register_module("bn1", nn::BatchNorm2d(planes));
  conv2 = register_module("conv2", conv3x3(planes, planes, 1));
  bn2 = register_module("bn2", nn::BatchNorm2d(planes));
  if (downsample_) downsample = register_module("downsample", std::move(downsample_));
}

torch::Tensor ResNetBasicBlockImpl::forward(const torch::Tensor& x) {
  torch::Tensor out = torch::relu(bn1(conv1(x)));
  out = bn2(conv2(out));
  out += downsample ? downsample->forward(x) : x;
  return torch::relu(out);
}

ResNetBottleneckImpl::ResNetBottleneckImpl(int64_t inplanes, int64_t planes, int64_t stride,
                                           nn::Sequential downsample_) {
  conv1 = register_module("conv1", conv1x1(inplanes, planes, 1));
  bn1 = register_module("bn1", nn::BatchNorm2d(planes));
  conv2 = register_module("conv2", conv3x3(planes, planes, stride));
  bn2 = register_module("bn2", nn::BatchNorm2d(planes));
  conv3 = register_module("conv3", conv1x1(planes, planes * expansion, 1));
  bn3 = register_module("bn3", nn::BatchNorm2d(planes * expansion));
  if (downsample_) downsample = register_module("downsample", std::move(downsample_));
}

torch::Tensor ResNetBottleneckImpl::forward(const torch::Tensor& x) {
  torch::Tensor out = torch::relu(bn1(conv1(x)));
  out = torch::relu(bn2(conv2(out)));
  out = bn3(conv3(out));
  out += downsample ? downsample->forward(x) : x;
  return torch::relu(out);
}

// ---------------------------------------------------------------------------------------------
// ResNet

void init_resnet_weights(torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  for (const auto& m : model.modules(/*include_self=*/false)) {
    if (auto* conv = m->as<nn::Conv2d>()) {
      nn::init::kaiming_normal_(conv->weight, 0.0, torch::kFanOut, torch::kReLU);
    } else if (auto* bn = m->as<nn::BatchNorm2d>()) {
      nn::init::ones_(bn->weight);
      nn::init::zeros_(bn->bias);
    }
  }
}

ResNetImpl::ResNetImpl(ResNetBlock block, std::vector<int64_t> layers, int64_t num_classes,
                       int64_t in_channels) {
  STOKER_CHECK(layers.size() == 4, "a ResNet has 4 stages, got {} block counts", layers.size());
  STOKER_CHECK(num_classes > 0 && in_channels > 0,
               "a ResNet needs positive num_classes and in_channels, got {} and {}", num_classes,
               in_channels);
  conv1 = register_module(
      "conv1", nn::Conv2d(nn::Conv2dOptions(in_channels, 64, 7).stride(2).padding(3).bias(false)));
  bn1 = register_module("bn1", nn::BatchNorm2d(64));
  maxpool = register_module("maxpool", nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1)));
  layer1 = register_module("layer1", make_layer(block, 64, layers[0], 1));
  layer2 = register_module("layer2", make_layer(block, 128, layers[1], 2));
  layer3 = register_module("layer3", make_layer(block, 256, layers[2], 2));
  layer4 = register_module("layer4", make_layer(block, 512, layers[3], 2));
  avgpool = register_module("avgpool", nn::AdaptiveAvgPool2d(1));
  fc = register_module("fc", nn::Linear(inplanes_, num_classes));

  init_resnet_weights(*this);
}

nn::Sequential ResNetImpl::make_layer(ResNetBlock block, int64_t planes, int64_t blocks,
                                      int64_t stride) {
  const int64_t expansion = block == ResNetBlock::basic ? ResNetBasicBlockImpl::expansion
                                                        : ResNetBottleneckImpl::expansion;
  auto make_block = [&](int64_t inplanes, int64_t s, nn::Sequential downsample) {
    return block == ResNetBlock::basic
               ? nn::AnyModule(ResNetBasicBlock(inplanes, planes, s, std::move(downsample)))
               : nn::AnyModule(ResNetBottleneck(inplanes, planes, s, std::move(downsample)));
  };
  nn::Sequential downsample{nullptr};
  if (stride != 1 || inplanes_ != planes * expansion) {
    downsample = nn::Sequential(conv1x1(inplanes_, planes * expansion, stride),
                                nn::BatchNorm2d(planes * expansion));
  }
  nn::Sequential layer;
  layer->push_back(make_block(inplanes_, stride, downsample));
  inplanes_ = planes * expansion;
  for (int64_t i = 1; i < blocks; ++i) layer->push_back(make_block(inplanes_, 1, nullptr));
  return layer;
}

torch::Tensor ResNetImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = maxpool(torch::relu(bn1(conv1(x))));
  y = layer4->forward(layer3->forward(layer2->forward(layer1->forward(y))));
  return fc(torch::flatten(avgpool(y), 1));
}

ResNet resnet18(int64_t num_classes, int64_t in_channels) {
  return ResNet(ResNetBlock::basic, std::vector<int64_t>{2, 2, 2, 2}, num_classes, in_channels);
}
ResNet resnet34(int64_t num_classes, int64_t in_channels) {
  return ResNet(ResNetBlock::basic, std::vector<int64_t>{3, 4, 6, 3}, num_classes, in_channels);
}
ResNet resnet50(int64_t num_classes, int64_t in_channels) {
  return ResNet(ResNetBlock::bottleneck, std::vector<int64_t>{3, 4, 6, 3}, num_classes,
                in_channels);
}
ResNet resnet101(int64_t num_classes, int64_t in_channels) {
  return ResNet(ResNetBlock::bottleneck, std::vector<int64_t>{3, 4, 23, 3}, num_classes,
                in_channels);
}

}  // namespace stoker::models
