// Image decoding for the data pipeline: telling JPEG from PNG by their magic bytes, reading an
// image's size from its header, and decoding one region of it into an 8-bit RGB or grayscale
// buffer that a loader worker reuses from sample to sample. JPEGs are decoded only as far as the
// region needs (libjpeg-turbo's horizontal crop and row skipping) and, when the caller allows, at a
// reduced DCT scale (1/8, 1/4 or 1/2), which is cheaper than decoding in full and resizing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace stoker::data {

// An 8-bit image, HWC, rows tightly packed (width * channels bytes per row).
struct Image {
  int64_t height = 0, width = 0, channels = 0;
  std::vector<uint8_t> pixels;
};

enum class ImageFormat { Jpeg, Png, Unknown };

// The format announced by the first bytes (JPEG: FF D8 FF; PNG: the 8-byte PNG signature).
ImageFormat sniff_format(const uint8_t* bytes, size_t size);

// What an image's header says. `channels` counts what the file stores: 1 gray, 2 gray + alpha,
// 3 color (a palette PNG counts as 3), 4 RGBA (PNG) or CMYK (JPEG).
struct ImageInfo {
  int64_t height = 0, width = 0, channels = 0;
  ImageFormat format = ImageFormat::Unknown;
};

// Images whose header claims more pixels than this are refused before anything is allocated for
// them (a decompression bomb, or a corrupt header): Pillow's default limit, 89,478,485 pixels.
constexpr int64_t kDefaultMaxImagePixels = int64_t(1024) * 1024 * 1024 / 4 / 3;

// Reads only the header. Throws stoker::Error naming `name` if the bytes are not a readable
// JPEG or PNG header, or if it claims more than `max_pixels` pixels.
ImageInfo probe_image(const uint8_t* bytes, size_t size, const std::string& name,
                      int64_t max_pixels = kDefaultMaxImagePixels);

// A rectangle in full-image pixels. width == 0 means the whole image (x, y and height must then
// be 0 as well).
struct Region {
  int64_t x = 0, y = 0, width = 0, height = 0;
};

struct DecodeOptions {
  Region region;  // decode only this part
  int64_t max_pixels = kDefaultMaxImagePixels;  // larger images are refused before allocating
  // JPEG only: decode at the smallest DCT scale of 1/8, 1/4, 1/2 and 1 at which the scaled region
  // is still at least min_width x min_height (libjpeg's other n/8 scales are slower than the next
  // power of two up; see choose_scale in decode.cpp). A minimum of 0 leaves that side
  // unconstrained; both 0 (the default) decode at full scale. A minimum larger than the region
  // gives full scale too: decoding never enlarges.
  int64_t min_width = 0;
  int64_t min_height = 0;
  int channels = 3;  // output: 3 = RGB, 1 = grayscale (Y = 0.299 R + 0.587 G + 0.114 B)
};

// Decodes `options.region` of a JPEG or PNG into `out` and returns the scale used (1.0 = full;
// JPEG may return 1/8, 1/4 or 1/2; PNG always returns 1.0).
//
// The output is exactly the requested region at that scale: round(region.width * scale) x
// round(region.height * scale) pixels (at least 1 x 1), starting at floor(region.x * scale),
// floor(region.y * scale) of the scaled image. At full scale a region decode is bit-identical to
// the same region cut from a full decode.
//
// Afterwards out.height/width/channels describe the result and out.pixels.size() equals
// height * width * channels. out.pixels keeps its capacity, so a worker that reuses one Image
// allocates only when an image is larger than any before it.
//
// Only the rows down to the bottom of the region are decoded, so damage below the region goes
// unnoticed. Throws stoker::Error naming `name` on bytes that are neither JPEG nor PNG, on
// corrupt, truncated or unsupported data (libjpeg's "corrupt data" warnings, after which it would
// carry on and fill gray, count as errors), on a region outside the image and on bad options;
// `out`'s sizes are then 0.
double decode_image(const uint8_t* bytes, size_t size, const DecodeOptions& options, Image& out,
                    const std::string& name);

}  // namespace stoker::data
