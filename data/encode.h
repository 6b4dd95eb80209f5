// Image encoding and resizing for writing data sets (`trainer pack`): JPEG with libjpeg-turbo, PNG
// with libpng, and a downscale that keeps the aspect ratio (OpenCV's area interpolation).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/decode.h"

namespace stoker::data {

// JPEG at `quality` (1..100), 4:2:0 for RGB; gray images stay gray. `name` names it in errors.
std::vector<uint8_t> encode_jpeg(const Image& image, int quality, const std::string& name);
// 8-bit PNG, gray or RGB.
std::vector<uint8_t> encode_png(const Image& image, const std::string& name);
// The image scaled down so that its longer side is `max_side` (unchanged when it already fits).
Image fit_within(const Image& image, int64_t max_side);

}  // namespace stoker::data
