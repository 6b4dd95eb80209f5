// The exponential moving average of a model's weights (see ema.h).
#include "optim/ema.h"

#include <cmath>
#include <map>

#include <fmt/ranges.h>
#include <torch/torch.h>

#include "common/error.h"

namespace stoker {

ModelEma::ModelEma(double decay, bool warmup) : decay_(decay), warmup_(warmup) {
  STOKER_CHECK(decay >= 0 && decay < 1, "train.ema_decay must be in [0, 1), got {}", decay);
}

double ModelEma::decay_at(int64_t n) const {
  if (n <= 1) return 0.0;
  if (!warmup_) return decay_;
  return std::min(decay_, 1.0 - std::pow(static_cast<double>(n), -2.0 / 3.0));
}

void ModelEma::attach(torch::nn::Module& model) {
  if (attached_ == &model) return;
  std::vector<std::string> names;
  std::vector<torch::Tensor> tensors;
  for (const auto& item : model.named_parameters()) {
    names.push_back(item.key());
    tensors.push_back(item.value());
  }
  for (const auto& item : model.named_buffers()) {
    names.push_back(item.key());
    tensors.push_back(item.value());
  }
  if (!average_.empty()) {
    STOKER_CHECK(names == names_, "the EMA of the weights was made for another model ({} tensors, "
                 "this one has {})",
                 names_.size(), names.size());
  } else {
    torch::NoGradGuard no_grad;
    for (const auto& t : tensors) average_.push_back(t.detach().clone());
    names_ = names;
  }
  model_ = tensors;
  model_float_.clear();
  average_float_.clear();
  model_other_.clear();
  average_other_.clear();
  for (size_t i = 0; i < model_.size(); ++i) {
    const bool lerp = model_[i].is_floating_point() && average_[i].is_floating_point() &&
                      model_[i].scalar_type() == average_[i].scalar_type();
    (lerp ? model_float_ : model_other_).push_back(model_[i].detach());
    (lerp ? average_float_ : average_other_).push_back(average_[i]);
  }
  attached_ = &model;
}

void ModelEma::update(torch::nn::Module& model) {
  const bool first = average_.empty();
  attach(model);
  ++updates_;
  if (first) return;  // the clone is the first average
  const double decay = decay_at(updates_);
  torch::NoGradGuard no_grad;
  if (!average_float_.empty()) torch::_foreach_lerp_(average_float_, model_float_, 1.0 - decay);
  if (!average_other_.empty()) torch::_foreach_copy_(average_other_, model_other_);  // one launch, not one per buffer
}

std::vector<std::pair<std::string, torch::Tensor>> ModelEma::named_tensors() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (size_t i = 0; i < average_.size(); ++i) out.emplace_back(names_[i], average_[i]);
  return out;
}

void ModelEma::load(const std::vector<std::pair<std::string, torch::Tensor>>& tensors, int64_t updates,
                    torch::nn::Module& model, const std::string& source) {
  attach(model);  // makes the average's tensors (a copy of the model) if there are none yet
  std::map<std::string, const torch::Tensor*> by_name;
  for (const auto& [name, t] : tensors) by_name[name] = &t;
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < names_.size(); ++i) {
    const auto it = by_name.find(names_[i]);
    STOKER_CHECK(it != by_name.end(),
                 "{}: the EMA of the weights has no '{}': it was saved for a different model; check "
                 "model.* in the config",
                 source, names_[i]);
    const torch::Tensor& t = *it->second;
    STOKER_CHECK(t.sizes() == average_[i].sizes(),
                 "{}: the EMA's '{}' has shape {} but the model expects {}; check model.* in the config",
                 source, names_[i], fmt::join(t.sizes(), "x"), fmt::join(average_[i].sizes(), "x"));
    average_[i].copy_(t);
  }
  STOKER_CHECK(by_name.size() == names_.size(),
               "{}: the EMA of the weights has {} tensors but the model has {}; check model.* in the "
               "config",
               source, by_name.size(), names_.size());
  updates_ = updates;
}

EmaWeightsInModel::EmaWeightsInModel(ModelEma& ema, torch::nn::Module& model) {
  if (ema.empty()) return;
  ema.attach(model);
  torch::NoGradGuard no_grad;
  model_ = ema.model_;
  for (size_t i = 0; i < model_.size(); ++i) {
    saved_.push_back(model_[i].detach().clone());
    model_[i].detach().copy_(ema.average_[i]);
  }
}

EmaWeightsInModel::~EmaWeightsInModel() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < model_.size(); ++i) model_[i].detach().copy_(saved_[i]);
}

}  // namespace stoker
