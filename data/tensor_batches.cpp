#include "data/tensor_batches.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include "common/error.h"
#include "data/random.h"

namespace stoker::data {

TensorBatches::TensorBatches(const torch::Tensor& inputs, const torch::Tensor& targets, int64_t batch_size,
                             torch::Device device, bool shuffle, uint64_t seed)
    : size_(inputs.defined() && inputs.dim() > 0 ? inputs.size(0) : 0),
      batch_size_(batch_size),
      shuffle_(shuffle),
      seed_(seed) {
  STOKER_CHECK(inputs.defined() && inputs.dim() >= 2 && inputs.is_floating_point(),
               "TensorBatches: inputs must be a floating-point tensor [N, C, ...], got {}",
               inputs.defined() ? fmt::format("{} [{}]", c10::toString(inputs.scalar_type()), fmt::join(inputs.sizes(), ", "))
                                : std::string("an undefined tensor"));
  STOKER_CHECK(targets.defined() && targets.dim() == 1 && targets.size(0) == size_ &&
                   targets.scalar_type() == torch::kLong,
               "TensorBatches: targets must be int64 [N] with N = {} (the inputs' rows)", size_);
  STOKER_CHECK(size_ > 0 && batch_size > 0, "TensorBatches: needs at least one sample and batch_size >= 1");
  inputs_ = inputs.to(device);
  targets_ = targets.to(device);
}

void TensorBatches::start_epoch(int64_t epoch, int64_t first_batch) {
  STOKER_CHECK(first_batch >= 0 && first_batch <= num_batches(), "TensorBatches: batch {} of an epoch of {}",
               first_batch, num_batches());
  if (shuffle_) {
    torch::Generator generator = at::detail::createCPUGenerator(mix_seed(seed_, static_cast<uint64_t>(epoch)));
    order_ = torch::randperm(size_, generator, torch::TensorOptions().dtype(torch::kLong)).to(inputs_.device());
  } else {
    order_ = torch::Tensor();
  }
  next_batch_ = first_batch;
}

std::optional<Batch> TensorBatches::next() {
  if (next_batch_ >= num_batches()) return std::nullopt;
  const int64_t begin = next_batch_ * batch_size_;
  const int64_t end = std::min(size_, begin + batch_size_);
  Batch b;
  b.index = next_batch_++;
  if (order_.defined()) {
    const torch::Tensor rows = order_.slice(0, begin, end);
    b.input = inputs_.index_select(0, rows);
    b.target = targets_.index_select(0, rows);
  } else {
    b.input = inputs_.slice(0, begin, end);
    b.target = targets_.slice(0, begin, end);
  }
  return b;
}

}  // namespace stoker::data
