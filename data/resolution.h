// Training and evaluation at sizes of their own (issue 22):
//
//   data.resolution_schedule  progressive resizing, as FFCV's ResNet recipes do (its
//                             ProgressiveResizing: min_res, max_res, start_ramp, end_ramp): the training
//                             crops are start_size pixels until start_epoch, end_size from end_epoch on,
//                             and in between the linear interpolation rounded to a multiple of `step`
//   data.eval_size            the evaluation crops' size, apart from training's (timm's RSB A3 trains
//                             at 160 and tests at 224; torchvision's v2 recipe trains at 176, tests at 224)
//
// Both set the output size of a list of transforms (with_output_size): the last crop takes the size
// and every sized transform before it scales in proportion, so [resize 256, center_crop 224] at 160
// becomes [resize 183, center_crop 160] (timm's crop_pct kept). The size is decided before decoding,
// so the JPEG decoder's DCT scaling makes a small epoch cheaper to decode too. Sizes change only
// between epochs (RetunableLoader::set_resolution), so that a batch never mixes sizes and every
// sample keeps its per-sample seed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/options.h"

namespace stoker::data {

struct ResolutionSchedule {
  int64_t start_size = 0;   // FFCV's min_res; 0: no schedule
  int64_t end_size = 0;     // FFCV's max_res
  int64_t start_epoch = 0;  // FFCV's start_ramp: the last epoch (counted from 0) at start_size
  int64_t end_epoch = 0;    // FFCV's end_ramp: the first epoch at end_size
  int64_t step = 32;        // sizes between the two are rounded to a multiple of it (FFCV: 32)

  bool enabled() const { return start_size > 0; }
  // Throws stoker::Error naming the key at fault (relative to the schedule: "end_epoch ...").
  void check() const;
  // The training size of `epoch` (counted from 0), as FFCV's get_resolution computes it: start_size
  // up to start_epoch, end_size from end_epoch, else the linear interpolation rounded to the nearest
  // multiple of `step` (halves to even, as numpy's round).
  int64_t size_at(int64_t epoch) const;
  // The sizes of epochs 0..epochs-1 as runs, for the log: "160 (epochs 1-6), 192 (epochs 7-16)",
  // epochs counted from 1 as the console counts them.
  std::string describe(int64_t epochs) const;
};

// `transforms` (data.train_transforms or data.eval_transforms) made to end at `size`: the last
// random_resized_crop, random_crop or center_crop takes it (or, without a crop, the last resize) and
// each resize or crop before it is scaled by size / its old size, rounded. `key` names the list in
// the error thrown when none of them has a size to set.
std::vector<TypedOptions> with_output_size(const std::vector<TypedOptions>& transforms, int64_t size,
                                           const std::string& key);
// The size a list of transforms ends at, as with_output_size finds it (0: none of its transforms has
// a size to set).
int64_t output_size_of(const std::vector<TypedOptions>& transforms);

}  // namespace stoker::data
