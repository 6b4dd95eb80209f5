#include "optim/grad_scaler.h"

#include <map>
#include <tuple>

#include <torch/torch.h>

#include "common/error.h"
#include "optim/optim.h"

namespace stoker {

GradScaler::GradScaler(GradScalerOptions options, torch::Device device) : options_(options) {
  STOKER_CHECK(options_.init_scale > 0, "scaler.init_scale must be positive, got {}", options_.init_scale);
  STOKER_CHECK(options_.growth_factor > 1, "scaler.growth_factor must be above 1, got {}",
               options_.growth_factor);
  STOKER_CHECK(options_.backoff_factor > 0 && options_.backoff_factor < 1,
               "scaler.backoff_factor must be in (0, 1), got {}", options_.backoff_factor);
  STOKER_CHECK(options_.growth_interval >= 1, "scaler.growth_interval must be at least 1, got {}",
               options_.growth_interval);
  const auto f32 = torch::TensorOptions().device(device).dtype(torch::kFloat32);
  scale_ = torch::full({1}, options_.init_scale, f32);
  growth_tracker_ = torch::zeros({1}, f32.dtype(torch::kInt32));
  found_inf_ = torch::zeros({1}, f32);
  skipped_ = torch::zeros({1}, f32);
  one_ = torch::ones({1}, f32);
}

torch::Tensor GradScaler::scale(const torch::Tensor& loss) const {
  if (!enabled()) return loss;
  return loss.to(torch::kFloat32) * scale_;
}

void GradScaler::check_and_unscale(torch::optim::Optimizer& optimizer, const torch::Tensor& inv_scale) {
  torch::NoGradGuard no_grad;
  found_inf_.zero_();
  // The kernel takes gradients of one dtype and device per call.
  std::map<std::tuple<torch::ScalarType, c10::DeviceType, c10::DeviceIndex>, std::vector<torch::Tensor>> groups;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      const torch::Tensor& g = p.grad();
      if (!g.defined()) continue;
      STOKER_CHECK(!g.is_sparse(), "the loss scaler does not support sparse gradients");
      groups[{g.scalar_type(), g.device().type(), g.device().index()}].push_back(g);
    }
  }
  for (auto& [key, grads] : groups) {
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf_, inv_scale);
  }
}

void GradScaler::unscale(torch::optim::Optimizer& optimizer) {
  if (!enabled()) return;
  STOKER_CHECK(stage_ == Stage::kReady,
               "GradScaler::unscale was called twice for one step (or after step()); call update() "
               "after each optimizer step");
  check_and_unscale(optimizer, scale_.reciprocal());
  stage_ = Stage::kUnscaled;
}

void GradScaler::step(torch::optim::Optimizer& optimizer) {
  if (!enabled()) {
    optimizer.step();
    return;
  }
  STOKER_CHECK(stage_ != Stage::kStepped,
               "GradScaler::step was called twice for one step; call update() after each step");
  auto* amp = dynamic_cast<AmpStepOptimizer*>(&optimizer);
  if (stage_ == Stage::kReady) {
    if (amp != nullptr) {
      // Only look for inf/NaN; the optimizer's kernel divides by S as it reads the gradients.
      check_and_unscale(optimizer, one_);
      amp->step_amp(scale_, found_inf_);
      stage_ = Stage::kStepped;
      return;
    }
    check_and_unscale(optimizer, scale_.reciprocal());
  }
  if (amp != nullptr) {
    amp->step_amp(std::nullopt, found_inf_);
  } else if (found_inf_.item<float>() == 0.0f) {
    optimizer.step();
  }
  stage_ = Stage::kStepped;
}

void GradScaler::update() {
  if (!enabled()) return;
  STOKER_CHECK(stage_ != Stage::kReady,
               "GradScaler::update was called before step() for this step; the order is scale → "
               "backward → [unscale] → step → update");
  torch::NoGradGuard no_grad;
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, options_.growth_factor,
                         options_.backoff_factor, options_.growth_interval);
  skipped_.add_(found_inf_);
  stage_ = Stage::kReady;
}

void GradScaler::abandon_step() {
  found_inf_.zero_();
  stage_ = Stage::kReady;
}

double GradScaler::scale_value() const { return enabled() ? scale_.item<double>() : 1.0; }

int64_t GradScaler::skipped_steps() const {
  return enabled() ? static_cast<int64_t>(skipped_.item<double>()) : 0;
}

void GradScaler::save(torch::serialize::OutputArchive& archive) const {
  archive.write("scale", scale_.cpu(), /*is_buffer=*/true);
  archive.write("growth_tracker", growth_tracker_.cpu(), /*is_buffer=*/true);
  archive.write("skipped", skipped_.cpu(), /*is_buffer=*/true);
}

void GradScaler::load(torch::serialize::InputArchive& archive) {
  torch::Tensor scale, tracker, skipped;
  if (!archive.try_read("scale", scale, /*is_buffer=*/true)) return;
  STOKER_CHECK(archive.try_read("growth_tracker", tracker, true) && archive.try_read("skipped", skipped, true),
               "the checkpoint's loss-scaler state is incomplete (scale without growth_tracker/skipped)");
  torch::NoGradGuard no_grad;
  scale_.copy_(scale);
  growth_tracker_.copy_(tracker);
  skipped_.copy_(skipped);
  stage_ = Stage::kReady;
}

}  // namespace stoker
