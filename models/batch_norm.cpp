// models::BatchNorm2d (models/batch_norm.h).
#include "models/batch_norm.h"

#include <torch/torch.h>

#include "models/onnx/nn.h"
#include "models/registry.h"

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

// In eval mode, which an export is, torch's BatchNorm2d's forward and so its exporter.
void register_batch_norm(FamilyRegistrar& r) {
  r.exporter<BatchNorm2dImpl>([](onnx::OnnxExport& e, const BatchNorm2dImpl& bn, const std::string& x) {
    return onnx_batch_norm2d(e, bn, x);
  });
}

}  // namespace stoker::models
