// Image decoding, the part common to both formats: telling them apart, pixel conversion, regions
// and scales, and the dispatch to decode_jpeg.cpp (libjpeg-turbo) and decode_png.cpp (libpng).
#include "data/decode.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "data/decode_detail.h"

namespace stoker::data::detail {

// A growable buffer per thread for one decoded row (JPEG, non-interlaced PNG) or a whole
// interlaced PNG; it keeps its largest size, so steady-state decoding does not allocate.
uint8_t* scratch(size_t bytes) {
  thread_local std::vector<uint8_t> buffer;
  if (buffer.size() < bytes) buffer.resize(bytes);
  return buffer.data();
}

// ---- pixels ------------------------------------------------------------------------------------

// ITU-R BT.601 luma in 16-bit fixed point, the weights and rounding libjpeg uses for its own
// RGB -> grayscale conversion, so PNG and CMYK images turn gray the same way JPEGs do.
inline uint8_t luma(unsigned r, unsigned g, unsigned b) {
  return static_cast<uint8_t>((19595 * r + 38470 * g + 7471 * b + 32768) >> 16);
}

// CMYK as libjpeg returns it. Adobe's files (those with an Adobe marker, which is nearly all CMYK
// JPEGs) store the inks inverted, 255 = no ink; then R = C * K / 255.
inline void cmyk_to_rgb(const uint8_t* cmyk, bool adobe_inverted, unsigned& r, unsigned& g,
                        unsigned& b) {
  unsigned c = cmyk[0], m = cmyk[1], y = cmyk[2], k = cmyk[3];
  if (!adobe_inverted) c = 255 - c, m = 255 - m, y = 255 - y, k = 255 - k;
  r = (c * k + 127) / 255;
  g = (m * k + 127) / 255;
  b = (y * k + 127) / 255;
}

// Converts `n` pixels of `src_channels` (1 gray, 3 RGB, 4 CMYK) to `dst_channels` (1 or 3).
void convert_pixels(const uint8_t* src, int src_channels, bool adobe_inverted, uint8_t* dst,
                    int dst_channels, int64_t n) {
  if (src_channels == dst_channels) {
    std::memcpy(dst, src, static_cast<size_t>(n) * dst_channels);
  } else if (src_channels == 1) {  // gray -> RGB
    for (int64_t i = 0; i < n; ++i) dst[3 * i] = dst[3 * i + 1] = dst[3 * i + 2] = src[i];
  } else if (src_channels == 3) {  // RGB -> gray
    for (int64_t i = 0; i < n; ++i) dst[i] = luma(src[3 * i], src[3 * i + 1], src[3 * i + 2]);
  } else {  // CMYK -> RGB or gray
    for (int64_t i = 0; i < n; ++i) {
      unsigned r, g, b;
      cmyk_to_rgb(src + 4 * i, adobe_inverted, r, g, b);
      if (dst_channels == 3) {
        dst[3 * i] = static_cast<uint8_t>(r);
        dst[3 * i + 1] = static_cast<uint8_t>(g);
        dst[3 * i + 2] = static_cast<uint8_t>(b);
      } else {
        dst[i] = luma(r, g, b);
      }
    }
  }
}

// ---- regions and scales ---------------------------------------------------------------------------

void check_options(const DecodeOptions& options, const std::string& name) {
  STOKER_CHECK(options.channels == 1 || options.channels == 3,
               "{}: cannot decode to {} channels; DecodeOptions::channels must be 3 (RGB) or 1 "
               "(grayscale)",
               name, options.channels);
  STOKER_CHECK(options.min_width >= 0 && options.min_height >= 0,
               "{}: minimum decode size {}x{} is negative; use 0 for no minimum", name,
               options.min_width, options.min_height);
}

void check_image_size(int64_t width, int64_t height, int64_t max_pixels, const std::string& name) {
  if (width <= 0 || height <= 0) STOKER_FAIL("{}: the header gives an empty {}x{} image; the file is corrupt", name, width, height);
  if (width * height > max_pixels) {
    STOKER_FAIL("{}: the header says {}x{} = {} pixels, more than max_image_pixels ({}); refused before "
                "decoding as a possible decompression bomb or corrupt header. If the image is genuine, "
                "make it smaller or raise max_image_pixels",
                name, width, height, width * height, max_pixels);
  }
}

// The region to decode in full-image pixels: the whole image when width == 0.
Region resolve_region(const Region& r, int64_t width, int64_t height, const std::string& name) {
  if (r.width == 0) {
    STOKER_CHECK(r.x == 0 && r.y == 0 && r.height == 0,
                 "{}: region x={} y={} width=0 height={}: width 0 means the whole image, so x, y "
                 "and height must be 0 too",
                 name, r.x, r.y, r.height);
    return Region{0, 0, width, height};
  }
  STOKER_CHECK(r.x >= 0 && r.y >= 0 && r.width > 0 && r.height > 0 && r.width <= width &&
                   r.height <= height && r.x <= width - r.width && r.y <= height - r.height,
               "{}: region {}x{} at x={} y={} does not lie inside the {}x{} image; the region must "
               "be non-empty and within the image (width 0 selects the whole image)",
               name, r.width, r.height, r.x, r.y, width, height);
  return r;
}

// The numerator n of the DCT scale n/8: the smallest of 1, 2, 4 and 8 at which the region is
// still at least min_width x min_height; 8 (full scale) when no minimum is set or none smaller
// meets it. The other scales are left out because libjpeg-turbo has no fast IDCT for them
// (plain C, and 4:2:0 chroma then goes through a 6x6 .. 14x14 IDCT): on 500x375 4:2:0 JPEGs of
// ~100 kB, 2-core x86-64, 3/8 took 1.07x the time of 1/2, and 5/8, 6/8, 7/8 took 1.2x, 1.35x,
// 1.6x the time of a full decode. The next power of two up is faster and gives more pixels.
int choose_scale(const Region& region, const DecodeOptions& options) {
  if (options.min_width == 0 && options.min_height == 0) return 8;
  if (options.min_width >= region.width || options.min_height >= region.height) return 8;
  for (int n : {1, 2, 4}) {
    if (region.width * n >= options.min_width * 8 && region.height * n >= options.min_height * 8) {
      return n;
    }
  }
  return 8;
}

// Maps [start, start + size) of the full image to the image scaled by n/8, whose extent along
// this axis is `scaled_extent` (libjpeg rounds it up): floor(start * s), round(size * s), at least
// one pixel, kept inside the scaled image.
Span scale_span(int64_t start, int64_t size, int n, int64_t scaled_extent) {
  Span s;
  s.size = std::clamp<int64_t>((size * n + 4) / 8, 1, scaled_extent);
  s.start = std::min(start * n / 8, scaled_extent - s.size);
  return s;
}

// The format of `bytes`, or an error naming the file when it is neither JPEG nor PNG.
ImageFormat require_format(const uint8_t* bytes, size_t size, const std::string& name) {
  const ImageFormat format = sniff_format(bytes, size);
  if (format != ImageFormat::Unknown) return format;
  std::string start;
  for (size_t i = 0; i < std::min<size_t>(size, 8); ++i) {
    start += fmt::format("{}{:02x}", i == 0 ? "" : " ", bytes[i]);
  }
  STOKER_FAIL("{}: not a JPEG or PNG ({}; JPEG starts with ff d8 ff, PNG with 89 50 4e 47 0d 0a 1a "
              "0a); Stoker decodes only these two: convert the file or remove it from the data set",
              name, size == 0 ? std::string("the data is empty") : "it starts with " + start);
}

}  // namespace stoker::data::detail

namespace stoker::data {
using namespace detail;

ImageFormat sniff_format(const uint8_t* bytes, size_t size) {
  static constexpr uint8_t kJpeg[] = {0xff, 0xd8, 0xff};
  static constexpr uint8_t kPng[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (size >= sizeof kJpeg && std::memcmp(bytes, kJpeg, sizeof kJpeg) == 0) return ImageFormat::Jpeg;
  if (size >= sizeof kPng && std::memcmp(bytes, kPng, sizeof kPng) == 0) return ImageFormat::Png;
  return ImageFormat::Unknown;
}

ImageInfo probe_image(const uint8_t* bytes, size_t size, const std::string& name, int64_t max_pixels) {
  ImageInfo result;
  result.format = require_format(bytes, size, name);
  const ImageInfo info = result.format == ImageFormat::Jpeg ? probe_jpeg(bytes, size, name)
                                                            : probe_png(bytes, size, name);
  result.width = info.width;
  result.height = info.height;
  result.channels = info.channels;
  check_image_size(result.width, result.height, max_pixels, name);
  return result;
}

double decode_image(const uint8_t* bytes, size_t size, const DecodeOptions& options, Image& out,
                    const std::string& name) {
  out.height = out.width = out.channels = 0;
  check_options(options, name);
  if (require_format(bytes, size, name) == ImageFormat::Jpeg) {
    return decode_jpeg(bytes, size, options, out, name);
  }
  return decode_png(bytes, size, options, out, name);
}

}  // namespace stoker::data
