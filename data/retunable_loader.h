// A Loader whose workers and prefetch depth can change between batches, without changing a sample:
// what `data.autotune: continuous` (issue 23) needs, and a test can check. The Loader's batches are a
// function of (seed, epoch, batch index) alone, so a new Loader with other worker settings, started at
// the epoch and batch where the old one stood, hands out exactly the batches the old one would have.
#pragma once

#include <cstdint>
#include <memory>

#include "data/loader.h"

namespace stoker::data {

class RetunableLoader : public BatchSource {
 public:
  RetunableLoader(std::shared_ptr<Dataset> dataset, LoaderOptions options);
  // Starts from `loader` (built over `dataset`), whose settings it keeps until set_workers.
  RetunableLoader(std::shared_ptr<Dataset> dataset, std::shared_ptr<Loader> loader);

  int64_t num_batches() const override { return loader_->num_batches(); }
  int64_t num_samples() const override { return loader_->num_samples(); }
  int64_t channels() const override { return loader_->channels(); }
  int64_t out_height() const override { return loader_->out_height(); }
  int64_t out_width() const override { return loader_->out_width(); }
  void start_epoch(int64_t epoch, int64_t first_batch = 0) override;
  std::optional<Batch> next() override;
  StageTimes take_times() override;
  std::vector<std::string> class_names() const override { return loader_->class_names(); }

  const LoaderOptions& options() const { return loader_->options(); }
  // Between batches: stops the current loader's workers (batches they built ahead are dropped and
  // built again), then continues the epoch from the next batch with `workers` threads and
  // `prefetch_factor` batches in flight per worker. The same settings again: nothing happens.
  void set_workers(int64_t workers, int64_t prefetch_factor);

 private:
  std::shared_ptr<Dataset> dataset_;
  std::shared_ptr<Loader> loader_;
  int64_t epoch_ = -1;      // the epoch started (-1: none yet)
  int64_t next_batch_ = 0;  // the index of the batch next() hands out next
  StageTimes carried_;      // times of loaders replaced since the last take_times()
};

}  // namespace stoker::data
