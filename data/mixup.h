// Mixup and CutMix (data.batch_ops type mixup): a batch operation on the device, after normalisation, with timm's
// `Mixup` semantics (timm/data/mixup.py). Each sample i is mixed with its mirror B-1-i in the batch
// (timm's x.flip(0)):
//   mixup    x_i <- lam x_i + (1 - lam) x_{B-1-i}, lam ~ Beta(mixup_alpha, mixup_alpha)
//   cutmix   a box of x_{B-1-i} pasted into x_i; lam ~ Beta(cutmix_alpha, cutmix_alpha) sizes the box
//            (sides sqrt(1 - lam) of the image's, centre uniform, clipped at the borders: timm's
//            rand_bbox), or cutmix_minmax draws its sides; lam is then corrected to the share of the
//            image the box leaves (timm's correct_lam)
// Each batch (mode: batch), each pair (i, B-1-i) (mode: pair) or each sample (mode: elem) is mixed
// with probability `prob`; with both alphas set, cutmix is picked with probability `switch_prob`.
// Targets become soft labels, label smoothing folded in (timm's mixup_target): with off = smoothing /
// C and on = 1 - smoothing + off, target_i = lam_i onehot(y_i) + (1 - lam_i) onehot(y_{B-1-i}).
// Every batch's targets are soft, mixed or not, so their shape never changes.
//
// Randomness: a batch's draws are a pure function of (seed, epoch, batch index) (data/random.h), so
// a run resumed mid-epoch and any worker count see the same mixed batches. An odd batch (a short
// last one) is fine in batch and elem mode (the middle sample is mixed with itself); in pair mode its
// middle sample stays unmixed (timm refuses odd batches).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/types.h>

#include "common/options.h"
#include "data/random.h"

namespace stoker::data {

// The options of the `mixup` batch operation (data/batch_ops.h).
struct MixupSettings : TypeOptionsOf<MixupSettings> {
  double mixup_alpha = 0.0;   // > 0: mixup on, lam ~ Beta(alpha, alpha); timm --mixup (RSB A3: 0.1)
  double cutmix_alpha = 0.0;  // > 0: cutmix on; timm --cutmix (RSB: 1.0)
  // [min, max] shares of the image's sides for cutmix boxes drawn uniformly (timm --cutmix-minmax);
  // empty: boxes sized by lam. Turns cutmix on (timm then takes cutmix_alpha as 1).
  std::vector<double> cutmix_minmax;
  double prob = 1.0;         // probability of mixing a batch / pair / sample (timm --mixup-prob)
  double switch_prob = 0.5;  // with both on: probability of cutmix rather than mixup (--mixup-switch-prob)
  std::string mode = "batch";  // batch | pair | elem (timm --mixup-mode)

  bool enabled() const { return mixup_alpha > 0 || cutmix_alpha > 0 || !cutmix_minmax.empty(); }
  bool cutmix_on() const { return cutmix_alpha > 0 || !cutmix_minmax.empty(); }
  void visit(OptionsVisitor& v) override;
  // Throws stoker::Error naming the keys when they disagree.
  void check() const override;
  // One line for the run's log.
  std::string describe() const;
};

// A box [yl, yh) x [xl, xh) of an image.
struct CutBox {
  int64_t yl = 0, yh = 0, xl = 0, xh = 0;
  int64_t area() const { return (yh - yl) * (xh - xl); }
};

// timm's rand_bbox (1.0) for a centre (cy, cx): sides cut = int(side * sqrt(1 - lam)), the box
// [c - cut // 2, c + (cut + 1) // 2) clipped to the image.
CutBox cutmix_box(int64_t height, int64_t width, double lam, int64_t cy, int64_t cx);
// The share of the image outside `box`: 1 - area / (height * width) (timm's corrected lam).
double box_lambda(const CutBox& box, int64_t height, int64_t width);

// One sample's draw: its lam (1 = unmixed) and, for cutmix, the box taken from its partner.
struct MixDraw {
  double lam = 1.0;
  bool cutmix = false;
  CutBox box;
};

// The draws for a whole batch of `batch` samples of height x width: one per sample (in batch mode all
// the same; in pair mode sample B-1-i has sample i's), lam already corrected for cutmix boxes.
std::vector<MixDraw> draw_mix(const MixupSettings& settings, int64_t batch, int64_t height, int64_t width,
                              uint64_t seed);

// The seed of batch `batch_index`'s draws in `epoch` of a run seeded with `seed`.
uint64_t mix_batch_seed(uint64_t seed, int64_t epoch, int64_t batch_index);

// A sample of Beta(alpha, alpha) (from two Gamma(alpha) draws, Marsaglia and Tsang).
double beta_sample(SampleRng& rng, double alpha);

// Applies `draws` (one per sample) to the normalised `input` [B, C, H, W] (any dtype, layout and
// device; not modified) and makes the soft targets from class indices `target` [B] with `num_classes`
// classes and label `smoothing`. Returns {mixed input, float32 targets [B, num_classes]}.
std::pair<torch::Tensor, torch::Tensor> apply_mix(const std::vector<MixDraw>& draws, const torch::Tensor& input,
                                                  const torch::Tensor& target, int64_t num_classes,
                                                  double smoothing);

}  // namespace stoker::data
