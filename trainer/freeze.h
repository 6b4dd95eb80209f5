// Freezing part of a model while the rest trains (model.freeze, model.freeze_until_epoch), as
// Lightning's BackboneFinetuning and timm's freeze do: the parameters the patterns match
// (models/weights/key_pattern.h) get no gradient (requires_grad off, so backward does not compute theirs)
// and so no optimizer update and no weight decay; the BatchNorm layers among them (modules with
// running statistics) stay in eval mode, their running statistics frozen too, while the rest of the
// model trains. With freeze_until_epoch N > 0 they train again from the start of the (N+1)-th epoch
// (0-based epoch N) on: the epoch decides, so a run resumed before or after that point is frozen or
// released as it was.
//
//   trainer.add_callback(std::make_shared<stoker::FreezeCallback>(FreezeOptions{{"conv1", "layer1"}, 3}));
//
// Parameters frozen until an epoch stay in the optimizer's groups (with no gradient they are
// skipped), so that the groups, and checkpoints of the optimizer, are the same before and after the
// release; those frozen for good are left out of the optimizer (recipe/parts.h does both).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include "trainer/trainer.h"

namespace stoker {

struct FreezeOptions {
  std::vector<std::string> patterns;  // model.freeze: key patterns of the parameters to freeze
  int64_t until_epoch = 0;            // model.freeze_until_epoch: frozen for this many epochs; 0 = for good
  bool enabled() const { return !patterns.empty(); }
  // Whether the parts are frozen during (0-based) `epoch`.
  bool frozen_at(int64_t epoch) const { return enabled() && (until_epoch == 0 || epoch < until_epoch); }
};

// The names of `model`'s parameters that `patterns` match; an error naming the patterns that match
// none (a typo, or another model's names) and some of the model's names.
std::vector<std::string> frozen_parameter_names(torch::nn::Module& model, const std::vector<std::string>& patterns);

// Sets requires_grad of the parameters `patterns` match to !frozen; returns how many changed.
int64_t set_frozen(torch::nn::Module& model, const std::vector<std::string>& patterns, bool frozen);

// Puts the modules with running statistics (BatchNorm) whose statistics `patterns` match in eval mode.
void frozen_norms_to_eval(torch::nn::Module& model, const std::vector<std::string>& patterns);

// Keeps the frozen parts frozen while training: sets requires_grad for the epoch the run starts in and
// at each epoch's start, keeps their BatchNorm layers in eval mode, and logs the release. `after_change`
// runs after the set of parameters that train changed (data parallel: a new gradient synchronisation).
class FreezeCallback : public Callback {
 public:
  explicit FreezeCallback(FreezeOptions options, std::function<void(Trainer&)> after_change = nullptr);
  void on_fit_start(Trainer& trainer) override;
  void on_epoch_start(Trainer& trainer, int64_t epoch) override;
  void on_model_train(Trainer& trainer) override;

 private:
  void apply(Trainer& trainer, int64_t epoch);
  FreezeOptions options_;
  std::function<void(Trainer&)> after_change_;
  int frozen_ = -1;  // -1: not yet applied by this callback; else whether the parts are frozen now
};

}  // namespace stoker
