// Writing a data set as WebDataset shards (`trainer pack`): an ImageFolder (train/ and val/ of class
// folders) or an IDX folder (MNIST / Fashion-MNIST) becomes `train-000000.tar`, ... and
// `val-000000.tar`, ... of ustar members `<key>.jpg|png` + `<key>.cls`, each shard's index beside it,
// and `_info.json` (timm's layout: per split its shard names and their lengths).
//
// Samples go into the shards in a seeded random order, so that a reader streaming shards (Python's
// webdataset with a shuffle buffer) sees mixed classes. With max_side, images whose longer side is
// larger are decoded, scaled down to it and written as JPEG at `quality`; otherwise the original
// bytes are kept (IDX images, which are raw pixels, are written as PNG). Samples are read and
// encoded on `workers` threads and written in order, so the output does not depend on their number.
// Each shard is written under a temporary name and renamed when complete, so a killed pack leaves
// no shard that looks whole; `_info.json` is written last.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>


namespace stoker::data {

// How far a split's packing has come (PackOptions::advance).
struct PackProgress {
  std::string split;         // train | validation
  int64_t done = 0, total = 0;  // samples written, and the split's
  int64_t bytes_read = 0;    // the samples' bytes as read from --from
  int64_t bytes_written = 0;  // as stored in the shards
  double seconds = 0;        // since the split started
};

// "train: 512 of 1000 samples (51%), 21.3 MB/s read, ETA 0:08": the rate from the bytes read so
// far, the time left at the rate of the samples so far ("ETA ?" before the first sample).
std::string format_pack_progress(const PackProgress& p);

struct PackOptions {
  std::string from;          // an ImageFolder root or an IDX folder
  std::string to;            // the output folder: created, and must hold no .tar files yet
  int64_t max_side = 0;      // 0: keep the images as they are
  int quality = 90;          // JPEG quality of re-encoded images
  double shard_size_mb = 256;  // a shard is closed before it would grow past this
  // Instead (when > 0): each split cut into this many shards of equal sample counts (the first
  // samples % shards shards one more); a split with fewer samples is an error.
  int64_t shards = 0;
  uint64_t seed = 0;         // the order of the samples in the shards
  // Threads reading and encoding samples (0: the hardware's threads). The shards are the same bytes
  // whatever the number: samples are encoded in parallel, a chunk at a time, and written in order.
  int64_t workers = 0;
  // Called after each chunk of samples is written (a few dozen per worker) and at a split's end.
  std::function<void(const PackProgress&)> advance;
  // Called after each shard is written: the split, samples written and the split's total.
  std::function<void(const std::string& split, const std::string& shard, int64_t done, int64_t total)> progress;
};

struct PackedSplit {
  std::string name;                 // train | validation (timm's split names)
  std::vector<std::string> shards;  // file names, in order
  std::vector<int64_t> lengths;     // samples per shard
  int64_t samples = 0, bytes = 0;
};

std::vector<PackedSplit> pack_dataset(const PackOptions& options);

}  // namespace stoker::data
