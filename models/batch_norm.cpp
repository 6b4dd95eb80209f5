// models::BatchNorm2d (models/batch_norm.h).
#include "models/batch_norm.h"

#include <torch/torch.h>

namespace stoker::models {

torch::Tensor BatchNorm2dImpl::forward(const torch::Tensor& input) {
  if (sync_ && is_training()) return sync_->forward(*this, input);
  return torch::nn::BatchNorm2dImpl::forward(input);
}

BatchNorms find_batch_norms(torch::nn::Module& model) {
  BatchNorms found;
  for (const auto& item : model.named_modules("", /*include_self=*/true)) {
    torch::nn::Module& m = *item.value();
    if (auto* ours = dynamic_cast<BatchNorm2dImpl*>(&m)) {
      found.ours.push_back(ours);
    } else if (m.as<torch::nn::BatchNorm1d>() || m.as<torch::nn::BatchNorm2d>() || m.as<torch::nn::BatchNorm3d>()) {
      found.foreign.push_back(item.key().empty() ? m.name() : item.key());
    }
  }
  return found;
}

}  // namespace stoker::models
