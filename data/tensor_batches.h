// TensorBatches: a BatchSource over tensors already in memory, for applications whose data is not a
// data set on disk (a simulator's output, a feature store, a test's fixtures):
//
//   auto train = std::make_shared<stoker::data::TensorBatches>(images, labels, 64, device);
//   auto trainer = stoker::make_trainer(config, model, train, nullptr, device);   // no eval source
//
// The inputs [N, C, H, W] (any floating dtype) and int64 targets [N] are moved to `device` once;
// each epoch hands out batches of `batch_size` in a fresh order (a function of the seed and the
// epoch: the same on every run and after a resume), the last one shorter when N is not a multiple.
#pragma once

#include <cstdint>
#include <optional>

#include <torch/types.h>

#include "data/batch_source.h"

namespace stoker::data {

class TensorBatches : public BatchSource {
 public:
  // `shuffle` false: the rows in their order every epoch.
  TensorBatches(const torch::Tensor& inputs, const torch::Tensor& targets, int64_t batch_size, torch::Device device,
                bool shuffle = true, uint64_t seed = 0);

  int64_t num_batches() const override { return (size_ + batch_size_ - 1) / batch_size_; }
  int64_t num_samples() const override { return size_; }
  int64_t channels() const override { return inputs_.size(1); }
  int64_t out_height() const override { return inputs_.dim() == 4 ? inputs_.size(2) : 1; }
  int64_t out_width() const override { return inputs_.dim() == 4 ? inputs_.size(3) : 1; }
  void start_epoch(int64_t epoch, int64_t first_batch = 0) override;
  std::optional<Batch> next() override;

 private:
  torch::Tensor inputs_, targets_, order_;
  int64_t size_ = 0, batch_size_ = 0, next_batch_ = 0;
  bool shuffle_ = true;
  uint64_t seed_ = 0;
};

}  // namespace stoker::data
