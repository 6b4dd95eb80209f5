// The data pipeline's randomness: every random choice (the epoch's order, a sample's crop and flip)
// is a pure function of (seed, epoch, sample index), mixed with splitmix64, so that batches are the
// same whatever the worker count, and a run resumed mid-epoch sees the batches it would have seen.
#pragma once

#include <cstdint>

namespace stoker::data {

// One splitmix64 step: a 64-bit mix of `x`.
inline uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A 64-bit mix of its inputs, the root of all per-sample randomness.
inline uint64_t mix_seed(uint64_t seed, uint64_t a, uint64_t b = 0) {
  return splitmix64(splitmix64(splitmix64(seed) ^ a) ^ b);
}

// The seed of sample `sample`'s random choices (crop, flip) in `epoch` of a run seeded with `seed`.
inline uint64_t sample_seed(uint64_t seed, int64_t epoch, int64_t sample) {
  return mix_seed(seed, static_cast<uint64_t>(epoch) + 1, static_cast<uint64_t>(sample));
}

// The seed of repeat `repeat` of a sample (repeated augmentation): repeat 0 draws as without
// repeats, the others from seeds mixed with the repeat index.
inline uint64_t sample_seed(uint64_t seed, int64_t epoch, int64_t sample, int64_t repeat) {
  const uint64_t first = sample_seed(seed, epoch, sample);
  return repeat == 0 ? first : mix_seed(first, 0x524550454154ull /* "REPEAT" */, static_cast<uint64_t>(repeat));
}

// A sample's part of a batch's digest (data::Batch::digest): its index and the seed of its draws.
inline uint64_t sample_digest(int64_t sample, uint64_t seed) {
  return splitmix64(seed ^ splitmix64(static_cast<uint64_t>(sample)));
}

// A small, fast per-sample random generator (splitmix64).
class SampleRng {
 public:
  explicit SampleRng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    const uint64_t r = splitmix64(state_);
    state_ += 0x9e3779b97f4a7c15ull;
    return r;
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  int64_t integer(int64_t lo, int64_t hi) {                                    // [lo, hi]
    if (hi <= lo) return lo;
    return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
  }

 private:
  uint64_t state_;
};

}  // namespace stoker::data
