// Finding inf/NaN in the loss, the gradients and the weights (see nonfinite.h).
#include "trainer/nonfinite.h"

#include <fmt/format.h>
#include <torch/torch.h>

namespace stoker {
namespace {

// "the loss became inf or NaN at step 7 (epoch 1, batch 7) with learning rate 1e+06"
std::string describe(const std::string& what, const StepPlace& p) {
  return fmt::format("{} became inf or NaN at step {} (epoch {}, batch {}) with learning rate {:g}", what,
                     p.step, p.epoch + 1, p.batch + 1, p.lr);
}

const char* flag_name(int which) { return which == 0 ? "the loss" : "the gradients"; }

}  // namespace

torch::Tensor nonfinite_flag(const std::vector<torch::Tensor>& tensors, torch::Device device) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> defined;
  for (const torch::Tensor& t : tensors) {
    if (t.defined() && t.numel() > 0) defined.push_back(t.detach());
  }
  const auto f32 = torch::TensorOptions().device(device).dtype(torch::kFloat32);
  if (defined.empty()) return torch::zeros({1}, f32);
  // One fused read-only pass: an inf/NaN element makes its tensor's norm inf/NaN.
  const std::vector<torch::Tensor> norms = torch::_foreach_norm(defined, 2);
  return torch::stack(norms).to(torch::kFloat32).sum().isfinite().logical_not().to(torch::kFloat32).reshape({1});
}

NonfiniteWatch::NonfiniteWatch(NonfiniteOptions options, torch::Device device) : options_(options) {
  STOKER_CHECK(options_.max_skips >= 1 && options_.check_every_steps >= 1,
               "NonfiniteOptions: max_skips and check_every_steps must be at least 1, got {} and {}",
               options_.max_skips, options_.check_every_steps);
  flags_ = torch::zeros({2}, torch::TensorOptions().device(device).dtype(torch::kFloat32));
}

void NonfiniteWatch::note_loss(const torch::Tensor& loss) {
  torch::NoGradGuard no_grad;
  flags_.narrow(0, 0, 1).add_(loss.detach().isfinite().logical_not().any().reshape({1}));
}

void NonfiniteWatch::note_gradients(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> grads;
  grads.reserve(params.size());
  for (const torch::Tensor& p : params) grads.push_back(p.grad());
  torch::NoGradGuard no_grad;
  flags_.narrow(0, 1, 1).add_(nonfinite_flag(grads, flags_.device()));
}

bool NonfiniteWatch::skip_this_step(const StepPlace& place) {
  if (!skipping()) return false;
  const torch::Tensor flags = flags_.cpu();
  const int which = flags[0].item<float>() > 0 ? 0 : (flags[1].item<float>() > 0 ? 1 : -1);
  if (which < 0) {
    in_a_row_ = 0;
    return false;
  }
  ++skips_;
  ++in_a_row_;
  if (in_a_row_ >= options_.max_skips) {
    throw NonfiniteError(fmt::format("{}, and in each of the {} steps in a row up to it (train.on_nonfinite: skip "
                                     "gives up after train.max_nonfinite_skips = {})",
                                     describe(flag_name(which), place), in_a_row_, options_.max_skips),
                         flag_name(which), place, in_a_row_);
  }
  return true;
}

void NonfiniteWatch::end_step(const StepPlace& place) {
  if (!skipping()) {
    kept_.push_back(flags_.clone());
    kept_places_.push_back(place);
  }
  flags_.zero_();
}

void NonfiniteWatch::check() {
  if (kept_.empty()) return;
  const torch::Tensor flags = torch::stack(kept_).cpu();  // [steps, 2]: the one synchronisation
  const std::vector<StepPlace> places = std::move(kept_places_);
  kept_.clear();
  kept_places_.clear();
  const auto f = flags.accessor<float, 2>();
  for (int64_t i = 0; i < f.size(0); ++i) {
    for (int which = 0; which < 2; ++which) {
      if (f[i][which] > 0) {
        throw NonfiniteError(describe(flag_name(which), places[static_cast<size_t>(i)]), flag_name(which),
                             places[static_cast<size_t>(i)], 0);
      }
    }
  }
}

int64_t NonfiniteWatch::take_skips() {
  const int64_t n = skips_;
  skips_ = 0;
  return n;
}

}  // namespace stoker
