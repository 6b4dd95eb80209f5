// Batch operations on the device after normalisation (data.batch_ops: mixup, random_erasing): a
// BatchSource that hands out another source's batches, each changed by a list of operations. The
// recipe wraps the training loader in one, so the Trainer steps on the changed batches without
// knowing of them; evaluation sources are never wrapped.
//
//   auto source = std::make_shared<data::AugmentedSource>(loader, std::vector<data::BatchOp>{
//       data::mixup_op(mixup, num_classes, smoothing, seed)});
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/batch_source.h"
#include "data/mixup.h"
#include "data/random_erasing.h"

namespace stoker::data {

// An operation on one batch of `epoch` (its index within the epoch is batch.index); it replaces the
// batch's tensors rather than writing into them (a cached source hands out the same tensors again).
using BatchOp = std::function<void(Batch& batch, int64_t epoch)>;

class AugmentedSource : public BatchSource {
 public:
  AugmentedSource(std::shared_ptr<BatchSource> inner, std::vector<BatchOp> ops);

  int64_t num_batches() const override { return inner_->num_batches(); }
  int64_t num_samples() const override { return inner_->num_samples(); }
  int64_t channels() const override { return inner_->channels(); }
  int64_t out_height() const override { return inner_->out_height(); }
  int64_t out_width() const override { return inner_->out_width(); }
  void start_epoch(int64_t epoch, int64_t first_batch = 0) override;
  // The inner source's next batch with every operation applied, in order; the time they took is in
  // its ops_seconds (not data wait) and in take_times().batch_ops.
  std::optional<Batch> next() override;
  StageTimes take_times() override;
  std::vector<std::string> class_names() const override { return inner_->class_names(); }
  BatchSource& inner() { return *inner_; }

 private:
  std::shared_ptr<BatchSource> inner_;
  std::vector<BatchOp> ops_;
  int64_t epoch_ = 0;
  double ops_seconds_ = 0;  // since the last take_times()
};

// Mixup/CutMix (data/mixup.h) as a batch operation: draws from mix_batch_seed(seed, epoch,
// batch.index), soft targets of `num_classes` classes with label `smoothing` folded in.
BatchOp mixup_op(MixupSettings settings, int64_t num_classes, double smoothing, uint64_t seed);

// Random erasing (data/random_erasing.h) as a batch operation: sample i of batch b is at position
// b x `batch_size` + i of the epoch and draws from erasing_sample_seed(seed, epoch, position).
BatchOp random_erasing_op(RandomErasingSettings settings, uint64_t seed, int64_t batch_size);

}  // namespace stoker::data
