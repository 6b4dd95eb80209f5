// The per-sample pipeline's stages and its bad-sample policy (see pipeline.h).
#include "data/pipeline.h"

#include <cmath>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/error.h"
#include "data/random.h"
#include "data/stage_clock.h"

namespace stoker::data {

SamplePipeline::SamplePipeline(std::shared_ptr<Dataset> dataset, SamplePipelineOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  STOKER_CHECK(dataset_ != nullptr && dataset_->size() > 0, "the data set is empty");
  if (!options_.warn) options_.warn = [](const std::string& m) { spdlog::warn("{}", m); };
  channels_ = dataset_->channels();
  const TransformPipeline& t = options_.transforms;
  STOKER_CHECK(!t.has_pixel_transforms() || channels_ == 1 || channels_ == 3,
               "rand_augment and trivial_augment_wide work on 1- or 3-channel images; the data set has {}",
               channels_);
  if (dataset_->height() > 0) {
    std::tie(out_height_, out_width_) = t.output_size(dataset_->height(), dataset_->width());
    STOKER_CHECK(out_height_ > 0 && out_width_ > 0, "the transforms produce an empty image");
  } else if (t.fixed_output()) {
    std::tie(out_height_, out_width_) = t.output_size(100, 100);
  }
}

void SamplePipeline::read(int64_t index, SampleWork& work) {
  StageTimer<std::atomic<int64_t>> timer(read_ns_, "read");
  work.index = index;
  work.raw.opens = 0;
  dataset_->read(index, work.raw);
  const RawSample& raw = work.raw;
  read_bytes_ += raw.encoded ? static_cast<int64_t>(raw.bytes.size())
                             : raw.image.height * raw.image.width * raw.image.channels;
  read_opens_ += raw.opens;
}

void SamplePipeline::decode(uint64_t seed, SampleWork& work) {
  StageTimer<std::atomic<int64_t>> timer(decode_ns_, "decode");
  SampleRng rng(seed);
  work.seed = seed;
  const RawSample& raw = work.raw;
  if (!raw.encoded) {
    const Image& im = raw.image;
    STOKER_CHECK(im.channels == channels_, "{}: {} channel(s), expected {}", dataset_->describe(work.index),
                 im.channels, channels_);
    work.plan = options_.transforms.plan(im.height, im.width, rng);
    work.region = Region{0, 0, im.width, im.height};
    return;
  }
  const std::string name = dataset_->describe(work.index);
  const ImageInfo info = probe_image(raw.bytes.data(), raw.bytes.size(), name, options_.max_image_pixels);
  const SamplePlan& plan = work.plan = options_.transforms.plan(info.height, info.width, rng);
  const Region have = work.region = needed_region(plan, info.height, info.width);
  if (have.width <= 0 || have.height <= 0) return;  // all padding: nothing to decode
  DecodeOptions d;
  d.region = have;
  d.channels = static_cast<int>(channels_);
  d.max_pixels = options_.max_image_pixels;
  // Decode at the smallest DCT scale that still leaves at least the output resolution.
  d.min_width = static_cast<int64_t>(std::ceil(double(plan.out_width) * have.width / plan.region.width));
  d.min_height = static_cast<int64_t>(std::ceil(double(plan.out_height) * have.height / plan.region.height));
  decode_image(raw.bytes.data(), raw.bytes.size(), d, work.decoded, name);
}

void SamplePipeline::transform(const SampleWork& work, uint8_t* out) {
  StageTimer<std::atomic<int64_t>> timer(transform_ns_, "transform");
  const SamplePlan& plan = work.plan;
  if (work.region.width > 0 && work.region.height > 0) {
    apply_plan(work.pixels(), work.region, plan, out);
  } else {
    std::memset(out, 0, static_cast<size_t>(plan.out_height * plan.out_width * channels_));
  }
  if (options_.transforms.has_pixel_transforms()) {
    options_.transforms.apply_pixels(PixelView{out, plan.out_height, plan.out_width, channels_}, work.seed);
  }
}

int64_t SamplePipeline::load(int64_t index, uint64_t seed, uint8_t* slot, SampleWork& work) {
  STOKER_CHECK(fixed_output(), "{}: images differ in size, so the transforms must end in a fixed-size "
               "crop (random_resized_crop, center_crop or random_crop) to make equal slots",
               dataset_->describe(index));
  read(index, work);
  decode(seed, work);
  STOKER_CHECK(work.plan.out_height == out_height_ && work.plan.out_width == out_width_,
               "{}: the transforms give {}x{} but batch slots are {}x{}", dataset_->describe(index),
               work.plan.out_height, work.plan.out_width, out_height_, out_width_);
  transform(work, slot);
  return work.raw.label;
}

int64_t SamplePipeline::fill(int64_t index, uint64_t seed, uint8_t* slot, SampleWork& work) {
  try {
    return load(index, seed, slot, work);
  } catch (const Error& e) {
    if (!options_.skip_bad_samples && !options_.exclude_bad_samples) throw;
    ++bad_count_;
    {
      std::lock_guard<std::mutex> lock(bad_mutex_);
      bad_names_.push_back(dataset_->describe(index));
    }
    options_.warn(fmt::format("{} bad sample {}: {}", options_.exclude_bad_samples ? "excluding" : "skipping",
                              index, e.what()));
  }
  if (options_.exclude_bad_samples) {
    std::memset(slot, 0, static_cast<size_t>(slot_bytes()));
    return kExcludedTarget;
  }
  // Replace it with another sample, chosen deterministically, so that the batch stays full.
  const int64_t n = dataset_->size();
  for (int64_t k = 1; k <= 16; ++k) {
    const int64_t other = (index + k * 7919) % n;
    try {
      return load(other, mix_seed(seed, static_cast<uint64_t>(k)), slot, work);
    } catch (const Error&) {
    }
  }
  STOKER_FAIL("sample {} ({}) and 16 replacements could not be read; is the data set damaged?", index,
              dataset_->describe(index));
}

StageTimes SamplePipeline::take_times() {
  StageTimes t;
  t.read = static_cast<double>(read_ns_.exchange(0)) * 1e-9;
  t.decode = static_cast<double>(decode_ns_.exchange(0)) * 1e-9;
  t.transform = static_cast<double>(transform_ns_.exchange(0)) * 1e-9;
  t.bad_samples = bad_count_.exchange(0);
  t.read_bytes = read_bytes_.exchange(0);
  t.read_opens = read_opens_.exchange(0);
  return t;
}

std::vector<std::string> SamplePipeline::bad_samples() const {
  std::lock_guard<std::mutex> lock(bad_mutex_);
  return bad_names_;
}

}  // namespace stoker::data
