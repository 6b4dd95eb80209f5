// Everything in models/, for users who want it all: the registry and Stoker's networks, their
// residual blocks, their batch norm (models::BatchNorm2d) and activation checkpointing, FLOP
// counting, state-dict exchange with Python (torch.save, safetensors), pretrained weights, layer
// groups, TorchScript and ONNX export and scripted networks.
// The families' headers come from models/families.h, which the build writes from CMakeLists.txt's
// STOKER_MODEL_FAMILIES. (tests/layering_test.py checks that the two name every header of models/
// and its rooms but *_detail.h.)
#pragma once

#include "models/families.h"  // every family's header (build/generated/models/)
#include "models/activation_checkpointing.h"
#include "models/flops.h"
#include "models/init.h"
#include "models/layer_groups.h"
#include "models/onnx/export.h"
#include "models/onnx/graph.h"
#include "models/onnx/nn.h"
#include "models/onnx/proto.h"
#include "models/registry.h"
#include "models/shape.h"
#include "models/timm.h"
#include "models/torchscript.h"
#include "models/weights/file_kind.h"
#include "models/weights/hub.h"
#include "models/weights/key_pattern.h"
#include "models/weights/pickle.h"
#include "models/weights/pretrained.h"
#include "models/weights/safetensors.h"
#include "models/weights/state_dict.h"
#include "models/weights/timm_names.h"
#include "models/weights/torch_save.h"
