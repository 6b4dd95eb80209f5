#include "data/retunable_loader.h"

#include "common/error.h"

namespace stoker::data {
namespace {

void add(StageTimes& to, const StageTimes& t) {
  to.read += t.read;
  to.decode += t.decode;
  to.transform += t.transform;
  to.wait += t.wait;
  to.copy += t.copy;
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
  add(carried_, loader_->take_times());
  loader_->retire();  // its workers stop and its buffers go before the new ones, whoever else holds it
  loader_.reset();
  loader_ = std::make_shared<Loader>(dataset_, std::move(options));
  if (epoch_ >= 0) loader_->start_epoch(epoch_, next_batch_);
}

}  // namespace stoker::data
