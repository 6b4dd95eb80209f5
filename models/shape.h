// ModelShape: the shape of the data a model is built for (from the data set, not from the model's
// options), as every model's constructor and the model registry take it.
#pragma once

#include <cstdint>

namespace stoker::models {

struct ModelShape {
  int64_t in_channels = 1;
  int64_t num_classes = 10;
};

}  // namespace stoker::models
