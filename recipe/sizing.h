// Sizing checks: tensor cores (and the CPU's vector units) work in tiles, so batch sizes and the
// channel counts of convolutions and linear layers that are multiples of 8 (batch sizes: powers of
// two) run faster than their neighbours. These checks name each size that misses and the nearest
// better value; with train.strict_sizes they are errors instead of warnings.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/nn/module.h>

namespace stoker {

// The nearest multiple of 8 to `n` (ties and n < 8 go up: 8).
int64_t nearest_multiple_of_8(int64_t n);
// The nearest power of two to `n` (ties go up).
int64_t nearest_power_of_two(int64_t n);

// One finding per size that is neither a power of two nor a multiple of 8 (the batch) or not a
// multiple of 8 (channels), each naming the key or layer and the nearest better value. Channel
// counts fixed by the data (`data_channels`, the model's input) and `num_classes` (its output) are
// exempt: the user cannot choose them.
std::vector<std::string> check_sizes(torch::nn::Module& model, int64_t batch_size,
                                     int64_t data_channels, int64_t num_classes);

}  // namespace stoker
