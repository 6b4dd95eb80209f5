#include "data/retunable_loader.h"

#include "common/error.h"
#include "common/log.h"
#include "data/resolution.h"

namespace stoker::data {
namespace {

void add(StageTimes& to, const StageTimes& t) {
  to.read += t.read;
  to.decode += t.decode;
  to.transform += t.transform;
  to.wait += t.wait;
  to.copy += t.copy;
  to.batch_ops += t.batch_ops;
  to.samples += t.samples;
  to.batches += t.batches;
  to.bad_samples += t.bad_samples;
}

}  // namespace

RetunableLoader::RetunableLoader(std::shared_ptr<Dataset> dataset, LoaderOptions options)
    : dataset_(std::move(dataset)), loader_(std::make_shared<Loader>(dataset_, std::move(options))) {}

RetunableLoader::RetunableLoader(std::shared_ptr<Dataset> dataset, std::shared_ptr<Loader> loader)
    : dataset_(std::move(dataset)), loader_(std::move(loader)) {
  STOKER_CHECK(dataset_ != nullptr && loader_ != nullptr, "RetunableLoader needs a data set and a loader");
}

void RetunableLoader::start_epoch(int64_t epoch, int64_t first_batch) {
  if (size_at_) {
    const int64_t size = size_at_(epoch);
    if (size != size_) {
      LoaderOptions options = loader_->options();
      options.transforms = with_output_size(base_transforms_, size, "data.train_transforms");
      replace(std::move(options));
      logger().info("data.resolution_schedule: epoch {} trains at {}x{}", epoch + 1, loader_->out_height(),
                    loader_->out_width());
      size_ = size;
    }
  }
  loader_->start_epoch(epoch, first_batch);
  epoch_ = epoch;
  next_batch_ = first_batch;
}

std::optional<Batch> RetunableLoader::next() {
  std::optional<Batch> batch = loader_->next();
  if (batch) next_batch_ = batch->index + 1;
  return batch;
}

StageTimes RetunableLoader::take_times() {
  StageTimes t = carried_;
  add(t, loader_->take_times());
  carried_ = StageTimes{};
  return t;
}

void RetunableLoader::set_workers(int64_t workers, int64_t prefetch_factor) {
  STOKER_CHECK(workers >= 0 && prefetch_factor >= 1, "set_workers: workers {} must be >= 0 and prefetch_factor {} >= 1",
               workers, prefetch_factor);
  const LoaderOptions& now = loader_->options();
  if (now.workers == workers && now.prefetch_factor == prefetch_factor) return;
  LoaderOptions options = now;
  options.workers = workers;
  options.prefetch_factor = prefetch_factor;
  replace(std::move(options));
  if (epoch_ >= 0) loader_->start_epoch(epoch_, next_batch_);
}

void RetunableLoader::set_resolution(std::function<int64_t(int64_t epoch)> size_at,
                                     std::vector<TypedOptions> transforms) {
  STOKER_CHECK(size_at != nullptr, "set_resolution needs a schedule");
  size_at_ = std::move(size_at);
  base_transforms_ = std::move(transforms);
  size_ = output_size_of(loader_->options().transforms);  // the next start_epoch changes it when the epoch needs
}

void RetunableLoader::replace(LoaderOptions options) {
  add(carried_, loader_->take_times());
  loader_->retire();  // its workers stop and its buffers go before the new ones, whoever else holds it
  loader_.reset();
  loader_ = std::make_shared<Loader>(dataset_, std::move(options));
}

}  // namespace stoker::data
