// models::BatchNorm2d: torch::nn::BatchNorm2d (the same options, parameters, buffers and names, so
// weights and torchvision state dicts move as before) whose training forward can be handed to a
// BatchNormSync. distributed.sync_batchnorm attaches one (parallel/sync_batchnorm.h) that normalises
// over the batches of every rank. Evaluation, and training without a sync attached, is
// torch::nn::BatchNorm2d's own forward, bit for bit.
//
// A model family builds its batch norms with it, so that distributed.sync_batchnorm reaches them:
//   bn1 = register_module("bn1", models::BatchNorm2d(planes));   // field: models::BatchNorm2d bn1{nullptr};
// A plain torch::nn::BatchNorm2d left in a model is refused by sync_batchnorm, naming the module.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>

namespace stoker::models {

// A batch norm's training forward done elsewhere (SyncBatchNorm: over every rank's batch).
class BatchNormSync {
 public:
  virtual ~BatchNormSync() = default;
  // `bn`'s training forward of `input` (N, C, ...), updating bn's running statistics as
  // torch::nn::BatchNorm2d does.
  virtual torch::Tensor forward(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& input) = 0;
};

class BatchNorm2dImpl : public torch::nn::BatchNorm2dImpl {
 public:
  using torch::nn::BatchNorm2dImpl::BatchNorm2dImpl;
  torch::Tensor forward(const torch::Tensor& input);
  // Training forwards go to `sync` (none: torch's own forward).
  void set_sync(std::shared_ptr<BatchNormSync> sync) { sync_ = std::move(sync); }
  const std::shared_ptr<BatchNormSync>& sync() const { return sync_; }

 private:
  std::shared_ptr<BatchNormSync> sync_;
};
TORCH_MODULE(BatchNorm2d);

// Every batch norm of `model` with its name: ours (`ours`) and torch::nn::BatchNorm1d/2d/3d that are
// not (`foreign`, by name), for sync_batchnorm to attach to or refuse.
struct BatchNorms {
  std::vector<BatchNorm2dImpl*> ours;
  std::vector<std::string> foreign;
};
BatchNorms find_batch_norms(torch::nn::Module& model);

}  // namespace stoker::models
