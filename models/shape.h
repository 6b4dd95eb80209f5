// ModelShape: the shape of the data a model is built for (from the data set, not from the model's
// options), as every model's constructor and the model registry take it.
#pragma once

#include <cstdint>

namespace stoker::models {

struct ModelShape {
  int64_t in_channels = 1;
  int64_t num_classes = 10;
  // The input's spatial size, for models whose parameters depend on it (a ViT's position
  // embedding); 0 when unknown (images of varying size, or a model built without its data).
  int64_t height = 0, width = 0;
};

}  // namespace stoker::models
