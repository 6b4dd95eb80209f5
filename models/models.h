// Everything in models/, for users who want it all: the registry and Stoker's networks, their
// residual blocks, and state-dict exchange with Python.
#pragma once

#include "models/blocks.h"
#include "models/cifar_resnet.h"
#include "models/compact_resnet.h"
#include "models/mlp.h"
#include "models/pickle.h"
#include "models/registry.h"
#include "models/resnet.h"
#include "models/state_dict.h"
#include "models/torch_save.h"
