// What the data-parallel strategies (ddp, zero1) answer alike: the ranks of a process group, the
// reductions of metrics and decisions over them, when stop requests are agreed, and the BatchNorm
// statistics before an evaluation (distributed.eval_bn). SyncBatchNorm (distributed.sync_batchnorm) is
// attached at set-up. A strategy that keeps gradients in some other way derives from it and sets
// `parallel_` in its setup().
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "distributed/data_parallel.h"
#include "parallel/strategy.h"

namespace stoker::parallel {

class OverRanks : public Strategy {
 public:
  explicit OverRanks(StrategyContext context) : context_(std::move(context)) {}

  int64_t rank() const override { return context_.group->rank(); }
  int64_t world_size() const override { return context_.group->world_size(); }
  std::string graph_obstacle() const override {
    return "it does not support distributed training yet (the gradient all-reduce runs outside the graph)";
  }
  void before_backward(bool sync) override { parallel_->before_backward(sync); }
  void after_backward(bool sync) override { parallel_->after_backward(sync); }
  void reduce_decision(torch::Tensor& flags) override;
  torch::Tensor mean(const torch::Tensor& t) override;
  void sum(std::vector<double>& values) override { parallel_->sum(values); }
  bool decision_due(int64_t step) const override;
  void before_evaluation(torch::nn::Module& model) override;

 protected:
  // distributed.sync_batchnorm: every models::BatchNorm2d of `model` over the batches of all ranks.
  void attach_sync_batchnorm(torch::nn::Module& model);

  StrategyContext context_;
  std::shared_ptr<distributed::DataParallel> parallel_;  // set by setup()
};

}  // namespace stoker::parallel
