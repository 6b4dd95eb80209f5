// The timm twins of the model types (models/timm.h).
#include "models/timm.h"

namespace stoker::models {

std::optional<weights::TimmDialect> timm_dialect(const std::string& model_type) {
  for (const auto family : {&resnet_timm, &convnext_timm, &vit_timm, &efficientnet_timm, &mobilenet_v3_timm}) {
    if (std::optional<weights::TimmDialect> dialect = family(model_type)) return dialect;
  }
  return std::nullopt;
}

}  // namespace stoker::models
