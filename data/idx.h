// Reading IDX files (the MNIST / Fashion-MNIST format), gzipped or raw, into uint8 tensors, and
// loading an image/label pair of them as one split of a labelled image data set.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include <torch/types.h>

namespace stoker::data {

// Reads one IDX file of unsigned bytes (type code 0x08) and returns a uint8 tensor whose shape is
// the file's dimensions. `.gz` files are decompressed on the fly; raw files are read as they are.
// Throws stoker::Error naming the file when it is missing, not IDX, truncated, or has trailing bytes.
torch::Tensor read_idx(const std::filesystem::path& path);

// One split of a labelled image data set held in memory.
struct ImageSet {
  torch::Tensor images;  // uint8, [N, C, H, W]
  torch::Tensor labels;  // int64, [N]
  std::string source;    // where it came from, for messages

  int64_t size() const { return labels.size(0); }
};

// Loads `<root>/<prefix>-images-idx3-ubyte[.gz]` and `<root>/<prefix>-labels-idx1-ubyte[.gz]`
// (prefix "train" or "t10k"), checks that counts match and labels are below `num_classes` (0: any).
ImageSet load_idx_split(const std::filesystem::path& root, const std::string& prefix,
                        int64_t num_classes);

}  // namespace stoker::data
