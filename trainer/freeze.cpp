// Freezing part of a model (trainer/freeze.h).
#include "trainer/freeze.h"

#include <fmt/ranges.h>

#include "common/error.h"
#include "common/log.h"
#include "models/weights/key_pattern.h"

namespace stoker {

std::vector<std::string> frozen_parameter_names(torch::nn::Module& model, const std::vector<std::string>& patterns) {
  std::vector<std::string> names, matched;
  for (const auto& p : model.named_parameters()) {
    names.push_back(p.key());
    if (models::weights::key_matches_any(patterns, p.key())) matched.push_back(p.key());
  }
  const std::vector<std::string> unmatched = models::weights::unmatched_patterns(patterns, names);
  STOKER_CHECK(unmatched.empty(),
               "model.freeze: {} match{} no parameter of the model, whose names are like {}; write patterns of "
               "those names (`layer1`, `conv1`, `*.bn1`)",
               models::weights::list_some(unmatched), unmatched.size() == 1 ? "es" : "", models::weights::list_some(names, 5));
  return matched;
}

int64_t set_frozen(torch::nn::Module& model, const std::vector<std::string>& patterns, bool frozen) {
  int64_t changed = 0;
  for (auto& p : model.named_parameters()) {
    if (!models::weights::key_matches_any(patterns, p.key()) || p.value().requires_grad() == !frozen) continue;
    p.value().set_requires_grad(!frozen);
    ++changed;
  }
  return changed;
}

void frozen_norms_to_eval(torch::nn::Module& model, const std::vector<std::string>& patterns) {
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    const auto buffers = item.value()->named_buffers(/*recurse=*/false);
    if (buffers.find("running_mean") == nullptr) continue;
    if (models::weights::key_matches_any(patterns, item.key() + ".running_mean")) item.value()->eval();
  }
}

FreezeCallback::FreezeCallback(FreezeOptions options, std::function<void(Trainer&)> after_change)
    : options_(std::move(options)), after_change_(std::move(after_change)) {}

void FreezeCallback::apply(Trainer& trainer, int64_t epoch) {
  const bool frozen = options_.frozen_at(epoch);
  if (frozen_ == static_cast<int>(frozen)) return;
  frozen_ = frozen;
  // make_parts froze the parts before the Trainer was built: nothing changes at the start of a new run.
  if (set_frozen(trainer.module(), options_.patterns, frozen) > 0) {
    trainer.trainable_changed();
    if (after_change_) after_change_(trainer);
  }
  if (frozen) {
    frozen_norms_to_eval(trainer.module(), options_.patterns);
    return;
  }
  trainer.module().train(trainer.module().is_training());  // the released BatchNorm layers train again
  logger().info("model.freeze: released {} at the start of epoch {}; the whole model trains from now on",
                fmt::join(options_.patterns, ", "), epoch + 1);
}

void FreezeCallback::on_fit_start(Trainer& trainer) { apply(trainer, trainer.state().epoch); }

void FreezeCallback::on_epoch_start(Trainer& trainer, int64_t epoch) { apply(trainer, epoch); }

void FreezeCallback::on_model_train(Trainer& trainer) {
  if (frozen_ == 1) frozen_norms_to_eval(trainer.module(), options_.patterns);
}

}  // namespace stoker
