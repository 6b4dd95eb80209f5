// What decode.cpp, decode_jpeg.cpp and decode_png.cpp share (not part of the public API:
// data/decode.h is). Pixel conversion, region and scale arithmetic, and the per-format entry points.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "data/decode.h"

namespace stoker::data::detail {

// A growable buffer per thread (one decoded row, or a whole interlaced PNG); it keeps its largest
// size, so steady-state decoding does not allocate.
uint8_t* scratch(size_t bytes);

// Converts `n` pixels of `src_channels` (1 gray, 3 RGB, 4 CMYK) to `dst_channels` (1 or 3).
void convert_pixels(const uint8_t* src, int src_channels, bool adobe_inverted, uint8_t* dst, int dst_channels,
                    int64_t n);

void check_options(const DecodeOptions& options, const std::string& name);
// An error naming the image when its header gives an empty size or more than `max_pixels` pixels:
// a corrupt or hostile header must not make a loader worker allocate gigabytes.
void check_image_size(int64_t width, int64_t height, int64_t max_pixels, const std::string& name);
// The region to decode, in full-image pixels (the whole image for an empty region); an error
// naming the image when it reaches outside it.
Region resolve_region(const Region& r, int64_t width, int64_t height, const std::string& name);
// The numerator n of the JPEG DCT scale n/8 for `region` under `options` (see decode.cpp).
int choose_scale(const Region& region, const DecodeOptions& options);

// A run of pixels along one axis.
struct Span {
  int64_t start = 0, size = 0;
};
Span scale_span(int64_t start, int64_t size, int n, int64_t scaled_extent);

ImageInfo probe_jpeg(const uint8_t* bytes, size_t size, const std::string& name);
ImageInfo probe_png(const uint8_t* bytes, size_t size, const std::string& name);
double decode_jpeg(const uint8_t* bytes, size_t size, const DecodeOptions& options, Image& out,
                   const std::string& name);
double decode_png(const uint8_t* bytes, size_t size, const DecodeOptions& options, Image& out,
                  const std::string& name);

}  // namespace stoker::data::detail
