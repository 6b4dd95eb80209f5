// Everything in models/, for users who want it all: the registry and Stoker's networks, their
// residual blocks, FLOP counting, state-dict exchange with Python, TorchScript and ONNX export.
// (tests/layering_test.py checks that it names every header of models/ but *_detail.h.)
#pragma once

#include "models/blocks.h"
#include "models/cifar_resnet.h"
#include "models/compact_resnet.h"
#include "models/flops.h"
#include "models/mlp.h"
#include "models/onnx_export.h"
#include "models/onnx_graph.h"
#include "models/onnx_nn.h"
#include "models/onnx_proto.h"
#include "models/onnx_registry.h"
#include "models/pickle.h"
#include "models/registry.h"
#include "models/resnet.h"
#include "models/shape.h"
#include "models/state_dict.h"
#include "models/torch_save.h"
#include "models/torchscript.h"
