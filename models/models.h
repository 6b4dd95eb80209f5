// Everything in models/, for users who want it all: the registry and Stoker's networks, their
// residual blocks, their batch norm (models::BatchNorm2d) and activation checkpointing, FLOP
// counting, state-dict exchange with Python and TorchScript export.
// (tests/layering_test.py checks that it names every header of models/ but *_detail.h.)
#pragma once

#include "models/activation_checkpointing.h"
#include "models/batch_norm.h"
#include "models/blocks.h"
#include "models/cifar_resnet.h"
#include "models/compact_resnet.h"
#include "models/flops.h"
#include "models/mlp.h"
#include "models/pickle.h"
#include "models/registry.h"
#include "models/resnet.h"
#include "models/shape.h"
#include "models/state_dict.h"
#include "models/torch_save.h"
#include "models/torchscript.h"
