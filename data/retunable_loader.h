// A Loader whose workers and prefetch depth can change between batches, without changing a sample:
// what `data.autotune: continuous` (issue 23) needs, and a test can check. The Loader's batches are a
// function of (seed, epoch, batch index) alone, so a new Loader with other worker settings, started at
// the epoch and batch where the old one stood, hands out exactly the batches the old one would have.
// Between epochs its output size can change too (set_resolution: data.resolution_schedule,
// data/resolution.h): each epoch is then the batches a Loader built at that epoch's size hands out,
// whatever the workers and wherever the run was resumed.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

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
  // From the next start_epoch on, epoch e's batches come out size_at(e) pixels square: `transforms`
  // (the loader's list as configured) made to end at that size (with_output_size). When the size
  // differs from the current loader's, start_epoch replaces the loader (the old one, its workers and
  // batch buffers, goes first) and logs the change. The shape reported before then is the current
  // loader's.
  void set_resolution(std::function<int64_t(int64_t epoch)> size_at, std::vector<TypedOptions> transforms);
  // The size the loader's transforms were last set to by set_resolution (0: never).
  int64_t resolution() const { return size_; }

 private:
  void replace(LoaderOptions options);

  std::shared_ptr<Dataset> dataset_;
  std::shared_ptr<Loader> loader_;
  int64_t epoch_ = -1;      // the epoch started (-1: none yet)
  int64_t next_batch_ = 0;  // the index of the batch next() hands out next
  StageTimes carried_;      // times of loaders replaced since the last take_times()
  std::function<int64_t(int64_t)> size_at_;   // set_resolution's schedule (empty: none)
  std::vector<TypedOptions> base_transforms_;  // and the transforms it resizes
  int64_t size_ = 0;                           // the current loader's size from set_resolution
};

}  // namespace stoker::data
