// Weight initialisations that libtorch's torch::nn::init lacks and torchvision's models use.
#pragma once

#include <torch/types.h>

namespace stoker::models {

// PyTorch's nn.init.trunc_normal_: values from N(mean, std^2) redrawn into [a, b] (absolute bounds,
// as PyTorch's, not in units of std), by inverse-CDF sampling of a uniform draw. In place, no grad.
torch::Tensor trunc_normal_(torch::Tensor tensor, double std = 1.0, double mean = 0.0, double a = -2.0,
                            double b = 2.0);

}  // namespace stoker::models
