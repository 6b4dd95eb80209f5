// The read stage in the doctor's words: the bytes and files it read per second, and the "many small
// reads" diagnosis (per-file opens dominate the read stage) with the `trainer pack` that removes them.
#pragma once

#include <string>

#include "doctor/doctor.h"

namespace stoker::doctor {

// Opens per sample from which reads count as per-file (ImageFolder: 1; shards, IDX, CIFAR: ~0), and
// the mean bytes per open under which such reads are small (latency, not bandwidth, sets their cost).
constexpr double kPerFileOpens = 0.5;
constexpr double kSmallReadBytes = 1 << 20;

// "read stage: 12.3 MB/s, 850 opens/s (1.00 opens and 14.5 KB a sample)"; "" when the rung read nothing.
std::string read_rates(const RungResult& rung);

// When the full rung loses most (storage reads) and its reads are per-file and small: a line naming
// "many small reads" and a remedy line with `trainer pack` and the size it predicts. Returns whether
// it added them.
bool small_reads_remedy(const LadderContext& c, const RungResult& full, Diagnosis& d);

// The max side `trainer pack --max-side` should scale to for crops of `out_side` pixels: the side
// times 8/7 (room for the crop) rounded up to a multiple of 32, at least 256.
int64_t pack_max_side(int64_t out_side);
// The shards' size predicted from the data set's stored bytes and decoded pixels per sample, images
// scaled to `max_side` on their longer side (taken as 4/3 of the shorter, as in ImageNet) at the
// originals' bytes per pixel, plus the tar headers of two members a sample.
double predicted_pack_bytes(double raw_bytes_per_sample, double pixels_per_sample, int64_t samples,
                            int64_t max_side);

}  // namespace stoker::doctor
