#include "data/augmented_source.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"
#include "common/trace.h"

namespace stoker::data {

AugmentedSource::AugmentedSource(std::shared_ptr<BatchSource> inner, std::vector<BatchOp> ops)
    : inner_(std::move(inner)), ops_(std::move(ops)) {
  STOKER_CHECK(inner_ != nullptr, "AugmentedSource needs a source to wrap");
}

void AugmentedSource::start_epoch(int64_t epoch, int64_t first_batch) {
  epoch_ = epoch;
  inner_->start_epoch(epoch, first_batch);
}

std::optional<Batch> AugmentedSource::next() {
  std::optional<Batch> batch = inner_->next();
  if (!batch) return batch;
  trace::Scope traced("batch augment");
  const int64_t start = trace::now_ns();
  for (const BatchOp& op : ops_) op(*batch, epoch_);
  const double seconds = static_cast<double>(trace::now_ns() - start) * 1e-9;
  batch->ops_seconds += seconds;  // with those of a source this one wraps, if any
  ops_seconds_ += seconds;
  return batch;
}

StageTimes AugmentedSource::take_times() {
  StageTimes t = inner_->take_times();
  t.batch_ops += ops_seconds_;
  ops_seconds_ = 0;
  return t;
}

BatchOp mixup_op(MixupSettings settings, int64_t num_classes, double smoothing, uint64_t seed) {
  settings.check();
  STOKER_CHECK(settings.enabled(),
               "mixup_op: the mixup batch operation is off (set its mixup_alpha, cutmix_alpha or cutmix_minmax)");
  return [settings, num_classes, smoothing, seed](Batch& batch, int64_t epoch) {
    const torch::Tensor& x = batch.input;
    STOKER_CHECK(x.dim() == 4 && x.is_floating_point(),
                 "mixup (data.batch_ops) needs normalised [B, C, H, W] batches, got {} {}", c10::toString(x.scalar_type()),
                 fmt::format("[{}]", fmt::join(x.sizes(), ", ")));
    const std::vector<MixDraw> draws =
        draw_mix(settings, x.size(0), x.size(2), x.size(3), mix_batch_seed(seed, epoch, batch.index));
    auto [input, target] = apply_mix(draws, x, batch.target, num_classes, smoothing);
    batch.input = std::move(input);
    batch.target = std::move(target);
  };
}

BatchOp random_erasing_op(RandomErasingSettings settings, uint64_t seed, int64_t batch_size) {
  settings.check();
  STOKER_CHECK(settings.enabled() && batch_size > 0,
               "random_erasing_op: the random_erasing batch operation's probability is 0 (off)");
  return [settings, seed, batch_size](Batch& batch, int64_t epoch) {
    const torch::Tensor& x = batch.input;
    STOKER_CHECK(x.dim() == 4 && x.is_floating_point(),
                 "random_erasing (data.batch_ops) needs normalised [B, C, H, W] batches, got {} {}", c10::toString(x.scalar_type()),
                 fmt::format("[{}]", fmt::join(x.sizes(), ", ")));
    std::vector<std::vector<EraseRect>> rects;
    std::vector<uint64_t> seeds;
    for (int64_t i = 0; i < x.size(0); ++i) {
      seeds.push_back(erasing_sample_seed(seed, epoch, batch.index * batch_size + i));
      rects.push_back(draw_erasing(settings, x.size(2), x.size(3), seeds.back()));
    }
    batch.input = apply_erasing(settings.mode, x, rects, seeds);
  };
}

}  // namespace stoker::data
