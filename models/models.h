// Everything in models/, for users who want it all: the registry and Stoker's networks, their
// residual blocks, their batch norm (models::BatchNorm2d) and activation checkpointing, FLOP
// counting, state-dict exchange with Python (torch.save, safetensors), pretrained weights, layer
// groups, TorchScript and ONNX export and scripted networks.
// (tests/layering_test.py checks that it names every header of models/ but *_detail.h.)
#pragma once

#include "models/activation_checkpointing.h"
#include "models/batch_norm.h"
#include "models/blocks.h"
#include "models/cifar_resnet.h"
#include "models/compact_resnet.h"
#include "models/convnext.h"
#include "models/efficientnet.h"
#include "models/file_kind.h"
#include "models/flops.h"
#include "models/init.h"
#include "models/key_pattern.h"
#include "models/layer_groups.h"
#include "models/mlp.h"
#include "models/mobile_blocks.h"
#include "models/mobilenet_v3.h"
#include "models/onnx_export.h"
#include "models/onnx_graph.h"
#include "models/onnx_nn.h"
#include "models/onnx_proto.h"
#include "models/pickle.h"
#include "models/pretrained.h"
#include "models/registry.h"
#include "models/resnet.h"
#include "models/safetensors.h"
#include "models/shape.h"
#include "models/state_dict.h"
#include "models/torch_save.h"
#include "models/torchscript.h"
#include "models/torchscript_model.h"
#include "models/vit.h"
