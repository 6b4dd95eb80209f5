// The per-sample pipeline: one sample from a Dataset to uint8 HWC pixels in a buffer, in three
// stages that can be called one at a time (a cache of raw bytes or of decoded images sits between
// them by wrapping the Dataset) and are each timed:
//
//   read       Dataset::read: the file's bytes, or already-decoded pixels (IDX, CIFAR, synthetic)
//   decode     plan the transforms on the image size (from the header), then decode only the
//              region the plan needs, at the smallest JPEG DCT scale that keeps the output size
//   transform  apply the plan (crop, resize, flip) straight into the output buffer, then the pixel
//              transforms (RandAugment, TrivialAugmentWide) on it in place
//
// and the bad-sample policy: an unreadable sample is either an error, or it is counted, named in a
// warning and replaced by another sample chosen deterministically. The Loader runs it in its workers
// for every batch; `trainer predict` runs it on image files; benchmarks time its stages.
//
//   SamplePipeline pipeline(dataset, SamplePipelineOptions().set_transforms(make_transform_pipeline(list)));
//   SampleWork work;                                          // per thread, reused
//   std::vector<uint8_t> slot(pipeline.slot_bytes());
//   int64_t label = pipeline.load(index, sample_seed(seed, epoch, index), slot.data(), work);
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "data/batch_source.h"
#include "data/dataset.h"
#include "data/transforms.h"

namespace stoker::data {

struct SamplePipelineOptions {
  TransformPipeline transforms;  // e.g. make_transform_pipeline(list) (data/transform_options.h)
  bool skip_bad_samples = false;  // fill(): replace an unreadable sample (and warn) instead of failing
  // fill(): exclude an unreadable sample (and warn): zero pixels and the label kExcludedTarget, for
  // evaluation, which must not count another sample in its place. Takes precedence over skip.
  bool exclude_bad_samples = false;
  int64_t max_image_pixels = kDefaultMaxImagePixels;  // larger encoded images are bad samples
  // Receives the bad-sample warnings. Default: spdlog's default logger.
  std::function<void(const std::string&)> warn;

  SamplePipelineOptions& set_transforms(TransformPipeline v) { transforms = std::move(v); return *this; }
  SamplePipelineOptions& set_skip_bad_samples(bool v) { skip_bad_samples = v; return *this; }
  SamplePipelineOptions& set_exclude_bad_samples(bool v) { exclude_bad_samples = v; return *this; }
  SamplePipelineOptions& set_max_image_pixels(int64_t v) { max_image_pixels = v; return *this; }
  SamplePipelineOptions& set_warn(std::function<void(const std::string&)> v) { warn = std::move(v); return *this; }
};

// One sample on its way through the stages. A worker keeps one and reuses it, so that buffers keep
// their capacity and steady-state loading does not allocate.
struct SampleWork {
  int64_t index = -1;
  uint64_t seed = 0;  // decode's: the sample's seed, which the pixel transforms draw from too
  RawSample raw;     // read's output
  SamplePlan plan;   // decode's: what the transforms do to this sample
  Image decoded;     // decode's: the part of an encoded sample that the plan needs
  Region region;     // the part of the source that pixels() holds (empty: the plan needs none of it)
  // The decoded pixels: `decoded` for an encoded sample, else the data set's own image.
  const Image& pixels() const { return raw.encoded ? decoded : raw.image; }
};

class SamplePipeline {
 public:
  SamplePipeline(std::shared_ptr<Dataset> dataset, SamplePipelineOptions options);

  const Dataset& dataset() const { return *dataset_; }
  const SamplePipelineOptions& options() const { return options_; }
  int64_t channels() const { return channels_; }
  // Whether every sample comes out the same size (a data set of one image size, or transforms that
  // end in a fixed-size crop); then out_height() x out_width() is that size, else both are 0.
  bool fixed_output() const { return out_height_ > 0; }
  int64_t out_height() const { return out_height_; }
  int64_t out_width() const { return out_width_; }
  int64_t slot_bytes() const { return out_height_ * out_width_ * channels_; }

  // The stages, in order, each timed. Thread-safe: workers share one pipeline.
  // Stage 1: the sample as the data set stores it, into work.raw.
  void read(int64_t index, SampleWork& work);
  // Stage 2: plans the transforms with the per-sample seed and decodes the part of an encoded
  // sample that the plan needs (work.plan, work.decoded, work.region).
  void decode(uint64_t seed, SampleWork& work);
  // Stage 3: writes the planned sample to `out`, work.plan.out_height x out_width x channels().
  void transform(const SampleWork& work, uint8_t* out);

  // All three stages into a slot of out_height() x out_width() (a fixed-output pipeline); returns the
  // label. Throws stoker::Error naming the sample (its file) when it cannot be loaded.
  int64_t load(int64_t index, uint64_t seed, uint8_t* slot, SampleWork& work);
  // load() with the bad-sample policy: with exclude_bad_samples a sample that fails is counted, named
  // in a warning, its slot zeroed and kExcludedTarget returned; with skip_bad_samples it is counted,
  // named and replaced by another (the same one for the same index and seed, whatever the thread);
  // with neither, or when 16 replacements fail too, the error is thrown.
  int64_t fill(int64_t index, uint64_t seed, uint8_t* slot, SampleWork& work);

  // Seconds in read, decode and transform (summed over threads), the bytes read and files opened, and
  // the bad samples, since the last call.
  StageTimes take_times();
  // Files of the samples skipped as unreadable so far.
  std::vector<std::string> bad_samples() const;

 private:
  std::shared_ptr<Dataset> dataset_;
  SamplePipelineOptions options_;
  int64_t channels_ = 0, out_height_ = 0, out_width_ = 0;
  std::atomic<int64_t> read_ns_{0}, decode_ns_{0}, transform_ns_{0}, bad_count_{0};
  std::atomic<int64_t> read_bytes_{0}, read_opens_{0};
  mutable std::mutex bad_mutex_;
  std::vector<std::string> bad_names_;
};

}  // namespace stoker::data
