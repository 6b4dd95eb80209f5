#include "trainer/losses.h"

#include <torch/torch.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"

namespace stoker {
namespace {

namespace F = torch::nn::functional;

// Soft targets must be one row per sample and one column per class of the logits.
void check_soft_target(const torch::Tensor& logits, const torch::Tensor& target, const char* loss) {
  STOKER_CHECK(target.sizes() == logits.sizes(),
               "loss.type: {}: soft targets must have the logits' shape [N, C] = [{}, {}], got {}; class "
               "indices must be int64 [N]",
               loss, logits.size(0), logits.dim() > 1 ? logits.size(1) : 0,
               fmt::format("[{}]", fmt::join(target.sizes(), ", ")));
}

bool is_soft(const torch::Tensor& target) { return target.is_floating_point(); }

}  // namespace

void BceKeys::visit(OptionsVisitor& v) {
  v.field("target_threshold", target_threshold, rules::unit_open());
}

torch::Tensor smoothed_one_hot(const torch::Tensor& target, int64_t num_classes, double smoothing) {
  STOKER_CHECK(target.dim() == 1 && !target.is_floating_point(),
               "smoothed_one_hot: expected class indices int64 [N], got {} {}", c10::toString(target.scalar_type()),
               fmt::format("[{}]", fmt::join(target.sizes(), ", ")));
  const double off = smoothing / static_cast<double>(num_classes);
  const double on = 1.0 - smoothing + off;
  torch::Tensor rows = torch::full({target.size(0), num_classes}, off,
                                   torch::TensorOptions().dtype(torch::kFloat32).device(target.device()));
  return rows.scatter_(1, target.to(torch::kLong).view({-1, 1}), on);
}

torch::Tensor cross_entropy_loss(const torch::Tensor& logits, const torch::Tensor& target, double smoothing) {
  if (!is_soft(target)) {
    return F::cross_entropy(logits, target, F::CrossEntropyFuncOptions().label_smoothing(smoothing));
  }
  check_soft_target(logits, target, "cross_entropy");
  return (-target.to(logits.dtype()) * torch::log_softmax(logits, -1)).sum(-1).mean();
}

torch::Tensor bce_loss(const torch::Tensor& logits, const torch::Tensor& target, double smoothing,
                       double target_threshold) {
  torch::Tensor t;
  if (is_soft(target)) {
    check_soft_target(logits, target, "bce");
    t = target.to(logits.dtype());
  } else {
    t = smoothed_one_hot(target, logits.size(-1), smoothing).to(logits.dtype());
  }
  if (target_threshold > 0) t = t.gt(target_threshold).to(t.dtype());
  return F::binary_cross_entropy_with_logits(logits, t);
}

namespace {

void add_stoker_losses(Registry<LossType>& r) {
  r.add("cross_entropy", {options_of<NoOptions>(), [](const TypeOptions&, double smoothing) -> LossFunction {
                            return [smoothing](const torch::Tensor& logits, const torch::Tensor& target) {
                              return cross_entropy_loss(logits, target, smoothing);
                            };
                          }});
  r.add("bce", {options_of<BceKeys>(), [](const TypeOptions& own, double smoothing) -> LossFunction {
                  const double threshold = dynamic_cast<const BceKeys&>(own).target_threshold;
                  return [smoothing, threshold](const torch::Tensor& logits, const torch::Tensor& target) {
                    return bce_loss(logits, target, smoothing, threshold);
                  };
                }});
}

}  // namespace

Registry<LossType>& loss_registry() { return lazy_registry<LossType, add_stoker_losses>("loss"); }

LossFunction make_loss(const TypedOptions& type, double label_smoothing) {
  return loss_registry().get(type.type()).make(type.options(), label_smoothing);
}

}  // namespace stoker
