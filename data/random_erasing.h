// Random erasing (data.batch_ops type random_erasing): timm's RandomErasing (timm/data/random_erasing.py, Zhong et
// al. 2017) as a batch operation on the device after normalisation, decided per sample. Each sample
// is erased with `probability`: `count` rectangles (min_count..max_count), each of a random share
// (min_area..max_area, divided by the count) of the image and a log-uniform aspect ratio
// (min_aspect..max_aspect), placed uniformly where it fits (10 tries each, as timm), filled with
//   const   zeros (the mean colour, after normalisation)
//   rand    one N(0, 1) value per channel
//   pixel   N(0, 1) per pixel and channel (what DeiT and "ResNet strikes back" use)
// A sample's draws (rectangles and noise) are a pure function of (seed, epoch, its position in the
// epoch): the same for any worker count and for a run resumed mid-epoch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/types.h>

#include "common/options.h"

namespace stoker::data {

// The options of the `random_erasing` batch operation (data/batch_ops.h).
struct RandomErasingSettings : TypeOptionsOf<RandomErasingSettings> {
  double probability = 0.0;     // per sample; 0 = off (timm --reprob; DeiT, RSB: 0.25)
  std::string mode = "const";   // const | rand | pixel (timm --remode)
  double min_area = 0.02;       // shares of the image's area
  double max_area = 1.0 / 3.0;
  double min_aspect = 0.3;      // height / width, drawn log-uniformly
  double max_aspect = 0.0;      // 0: 1 / min_aspect
  int64_t min_count = 1;        // rectangles per erased sample (timm --recount is max_count)
  int64_t max_count = 0;        // 0: min_count

  bool enabled() const { return probability > 0; }
  void visit(OptionsVisitor& v) override;
  // Throws stoker::Error naming the keys when they disagree.
  void check() const override;
  std::string describe() const;
};

// One erased rectangle: rows [top, top + height), columns [left, left + width).
struct EraseRect {
  int64_t top = 0, left = 0, height = 0, width = 0;
};

// The seed of the sample at `position` in `epoch` (batch index x batch size + row) of a run seeded
// with `seed`.
uint64_t erasing_sample_seed(uint64_t seed, int64_t epoch, int64_t position);

// The rectangles one sample of height x width gets from its seed (none when it is not erased):
// timm's _erase, draw by draw.
std::vector<EraseRect> draw_erasing(const RandomErasingSettings& settings, int64_t height, int64_t width,
                                    uint64_t sample_seed);

// `input` [B, C, H, W] (not modified) with sample i's rectangles `rects[i]` filled as `mode` says;
// the noise of sample i comes from `sample_seeds[i]`. Returns a new tensor when anything is erased,
// else `input`.
torch::Tensor apply_erasing(const std::string& mode, const torch::Tensor& input,
                            const std::vector<std::vector<EraseRect>>& rects,
                            const std::vector<uint64_t>& sample_seeds);

}  // namespace stoker::data
