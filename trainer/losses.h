// The training losses, as registered types (`loss.type` and its keys beside it): each turns float32
// logits [N, C] and the batch's targets into a scalar. Targets are either class indices (int64 [N])
// or soft targets (float [N, C], a probability distribution per row: what the mixup batch operation
// of data.batch_ops hands out).
//
//   loss.type       on class indices                          on soft targets
//   cross_entropy   cross-entropy with label smoothing         -sum(target * log_softmax(logits)) per
//                   (torch.nn.functional.cross_entropy)        row, averaged (timm SoftTargetCrossEntropy)
//   bce             binary cross-entropy with logits against the targets as given, per class and
//                   the smoothed one-hot targets (off =        sample, averaged; with target_threshold,
//                   smoothing / C, on = 1 - smoothing + off)   targets above it become 1, the rest 0
//                   (timm BinaryCrossEntropy, the loss of "ResNet strikes back")
//
// Soft targets are used as they are: label smoothing is folded into them by whoever made them
// (the mixup batch operation, as timm's mixup_target does), never applied a second time.
#pragma once

#include <functional>
#include <string>

#include <torch/types.h>

#include "common/options.h"
#include "common/registry.h"

namespace stoker {

// The loss: float32 logits and targets in, a scalar out (what TrainerParts::loss holds).
using LossFunction = std::function<torch::Tensor(const torch::Tensor& logits, const torch::Tensor& target)>;

// bce's own key: timm's --bce-target-thresh. Targets above it become 1, the others 0 (after label
// smoothing and mixing); 0 = off (the targets as they are).
struct BceKeys : TypeOptionsOf<BceKeys> {
  double target_threshold = 0.0;
  void visit(OptionsVisitor& v) override;
};

// A loss.type: its own keys and the loss it makes for a label smoothing (train.label_smoothing).
struct LossType {
  OptionsMaker options = options_of<NoOptions>();
  std::function<LossFunction(const TypeOptions& own, double label_smoothing)> make;
};

// The loss types by name: cross_entropy, bce; applications may register more.
Registry<LossType>& loss_registry();

// The loss of `type` (an entry of loss_registry()) with its keys `own` and label smoothing.
LossFunction make_loss(const TypedOptions& type, double label_smoothing);

// Class indices [N] as smoothed one-hot rows [N, num_classes] (timm's one_hot with off = smoothing /
// C, on = 1 - smoothing + off), float32 on the indices' device.
torch::Tensor smoothed_one_hot(const torch::Tensor& target, int64_t num_classes, double smoothing);

// The losses themselves (what the registered types make), for targets of either kind.
torch::Tensor cross_entropy_loss(const torch::Tensor& logits, const torch::Tensor& target, double smoothing);
torch::Tensor bce_loss(const torch::Tensor& logits, const torch::Tensor& target, double smoothing,
                       double target_threshold);

}  // namespace stoker
