// An exponential moving average of a model's weights (train.ema_decay), as timm's ModelEmaV3:
// after every optimizer step, each floating-point parameter and buffer e of the average moves
// towards the model's w by e <- e + (1 - decay) * (w - e), in one torch::_foreach_lerp_ on the
// device, with no host synchronisation; integer buffers (BatchNorm's batch counts) are copied. The
// first update copies the weights. With warm-up (train.ema_warmup) the decay of update n (1-based,
// n >= 2) is min(decay, 1 - n^(-2/3)), so that early averages forget the random initialisation.
//
//   stoker::ModelEma ema(0.9998);
//   for (...) { optimizer.step(); ema.update(model); }
//   { stoker::EmaWeightsInModel swap(ema, model); evaluate(model); }  // the model is restored after
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>

namespace stoker {

class ModelEma {
 public:
  explicit ModelEma(double decay, bool warmup = false);

  // Folds `model`'s current weights into the average (the first call copies them).
  void update(torch::nn::Module& model);
  // The decay that update number `n` (1-based) uses: 0 for the first.
  double decay_at(int64_t n) const;
  // Updates so far.
  int64_t updates() const { return updates_; }
  // True before the first update (or load): there is no average yet.
  bool empty() const { return average_.empty(); }
  double decay() const { return decay_; }

  // The average, by the model's parameter and buffer names (shared, not copied).
  std::vector<std::pair<std::string, torch::Tensor>> named_tensors() const;
  // Restores an average saved from named_tensors() for `model` (every name present, same shapes;
  // stoker::Error naming `source` otherwise) and its update count.
  void load(const std::vector<std::pair<std::string, torch::Tensor>>& tensors, int64_t updates,
            torch::nn::Module& model, const std::string& source);

 private:
  friend class EmaWeightsInModel;
  // Collects `model`'s tensors (once per model) and, when there is no average yet, clones them.
  void attach(torch::nn::Module& model);

  double decay_;
  bool warmup_;
  int64_t updates_ = 0;
  const torch::nn::Module* attached_ = nullptr;
  std::vector<std::string> names_;
  std::vector<torch::Tensor> model_float_, average_float_;  // lerped
  std::vector<torch::Tensor> model_other_, average_other_;  // copied (integer buffers)
  std::vector<torch::Tensor> average_;  // all of the average, in names_ order
  std::vector<torch::Tensor> model_;    // all of the model, in names_ order
};

// While alive, `model` holds the average's weights; its own are put back when it goes away.
// With an empty average the model is left as it is.
class EmaWeightsInModel {
 public:
  EmaWeightsInModel(ModelEma& ema, torch::nn::Module& model);
  ~EmaWeightsInModel();
  EmaWeightsInModel(const EmaWeightsInModel&) = delete;
  EmaWeightsInModel& operator=(const EmaWeightsInModel&) = delete;

 private:
  std::vector<torch::Tensor> model_, saved_;
};

}  // namespace stoker
