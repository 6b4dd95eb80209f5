// Tests for data/decode: the images are encoded here, in memory, with libjpeg (quality 95) and
// libpng from a smooth synthetic RGB pattern, so JPEG's error against the source stays small and
// every expectation can be computed from the source pixels.
#include "data/decode.h"

#include <algorithm>
#include <cmath>
#include <cstdio>  // before jpeglib.h, which uses FILE and size_t without including them
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <jpeglib.h>
#include <png.h>
#include <zlib.h>

#include "common/error.h"
#include "test_util.h"

namespace stoker::data {
namespace {
using stoker::testing::error_of;

// The test image: 123 x 97, sizes that are multiples of neither 8 nor 16.
constexpr int64_t kWidth = 123;
constexpr int64_t kHeight = 97;

// Tolerances, in 8-bit levels (mean absolute error over all samples).
constexpr double kJpegTolerance = 2.0;        // a quality-95 JPEG against its source (seen: <= 0.73)
constexpr double kScaledJpegTolerance = 2.0;  // a scaled decode against a box-filtered source (<= 1.0)

using Pixels = std::vector<uint8_t>;

// Smooth RGB: a horizontal and a vertical ramp and a slow wave.
Pixels smooth_rgb(int64_t height, int64_t width) {
  Pixels p(height * width * 3);
  for (int64_t y = 0; y < height; ++y) {
    for (int64_t x = 0; x < width; ++x) {
      uint8_t* px = &p[(y * width + x) * 3];
      px[0] = static_cast<uint8_t>(255 * x / (width - 1));
      px[1] = static_cast<uint8_t>(255 * y / (height - 1));
      px[2] = static_cast<uint8_t>(std::lround(128 + 90 * std::sin(x * 0.11) * std::cos(y * 0.09)));
    }
  }
  return p;
}

uint8_t luma(int r, int g, int b) {
  return static_cast<uint8_t>((19595 * r + 38470 * g + 7471 * b + 32768) >> 16);
}

Pixels to_gray(const Pixels& rgb) {
  Pixels g(rgb.size() / 3);
  for (size_t i = 0; i < g.size(); ++i) g[i] = luma(rgb[3 * i], rgb[3 * i + 1], rgb[3 * i + 2]);
  return g;
}

// Region `r` of an HWC image `width` pixels wide.
Pixels cut(const Pixels& image, int64_t width, int64_t channels, const Region& r) {
  Pixels out;
  for (int64_t y = r.y; y < r.y + r.height; ++y) {
    const auto row = image.begin() + (y * width + r.x) * channels;
    out.insert(out.end(), row, row + r.width * channels);
  }
  return out;
}

double mean_abs_error(const Pixels& a, const Pixels& b) {
  EXPECT_EQ(a.size(), b.size());
  if (a.size() != b.size() || a.empty()) return 1e9;
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += std::abs(int(a[i]) - int(b[i]));
  return sum / a.size();
}

// What a decode at scale n/8 should look like: each output pixel the mean of the source box it
// covers (out_width x out_height pixels, starting at the top-left corner).
Pixels box_scaled(const Pixels& src, int64_t width, int64_t height, int n, int64_t out_width,
                  int64_t out_height) {
  Pixels out(out_width * out_height * 3);
  for (int64_t oy = 0; oy < out_height; ++oy) {
    for (int64_t ox = 0; ox < out_width; ++ox) {
      const int64_t y0 = oy * 8 / n, y1 = std::min(height, ((oy + 1) * 8 + n - 1) / n);
      const int64_t x0 = ox * 8 / n, x1 = std::min(width, ((ox + 1) * 8 + n - 1) / n);
      for (int c = 0; c < 3; ++c) {
        double sum = 0;
        for (int64_t y = y0; y < y1; ++y) {
          for (int64_t x = x0; x < x1; ++x) sum += src[(y * width + x) * 3 + c];
        }
        out[(oy * out_width + ox) * 3 + c] = static_cast<uint8_t>(std::lround(sum / ((y1 - y0) * (x1 - x0))));
      }
    }
  }
  return out;
}

// ---- encoders -------------------------------------------------------------------------------------

enum class JpegLayout { Yuv420, Yuv422, Yuv444, Progressive420, Gray, Cmyk };

const char* layout_name(JpegLayout layout) {
  switch (layout) {
    case JpegLayout::Yuv420: return "baseline 4:2:0";
    case JpegLayout::Yuv422: return "baseline 4:2:2";
    case JpegLayout::Yuv444: return "baseline 4:4:4";
    case JpegLayout::Progressive420: return "progressive 4:2:0";
    case JpegLayout::Gray: return "grayscale";
    case JpegLayout::Cmyk: return "Adobe CMYK";
  }
  return "?";
}

// Encodes HWC pixels with libjpeg at quality 95: RGB for the color layouts, one channel for Gray,
// four (stored as given; libjpeg writes an Adobe marker) for Cmyk.
Pixels encode_jpeg(const Pixels& pixels, int64_t height, int64_t width, JpegLayout layout) {
  const int components = layout == JpegLayout::Gray ? 1 : layout == JpegLayout::Cmyk ? 4 : 3;
  jpeg_compress_struct cinfo{};
  jpeg_error_mgr jerr{};
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = static_cast<JDIMENSION>(width);
  cinfo.image_height = static_cast<JDIMENSION>(height);
  cinfo.input_components = components;
  cinfo.in_color_space = components == 1 ? JCS_GRAYSCALE : components == 3 ? JCS_RGB : JCS_CMYK;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, 95, TRUE);
  if (components == 3) {  // luma sampling factors; chroma stays 1x1
    cinfo.comp_info[0].h_samp_factor = layout == JpegLayout::Yuv444 ? 1 : 2;
    cinfo.comp_info[0].v_samp_factor =
        layout == JpegLayout::Yuv420 || layout == JpegLayout::Progressive420 ? 2 : 1;
  }
  if (layout == JpegLayout::Progressive420) jpeg_simple_progression(&cinfo);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(&pixels[cinfo.next_scanline * width * components]);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  Pixels out(buffer, buffer + size);
  std::free(buffer);
  return out;
}

Pixels encode_jpeg(const Pixels& rgb, JpegLayout layout) {
  if (layout == JpegLayout::Gray) return encode_jpeg(to_gray(rgb), kHeight, kWidth, layout);
  if (layout == JpegLayout::Cmyk) {  // Adobe's inverted CMYK: C = R, M = G, Y = B, K = 255
    Pixels cmyk;
    for (size_t i = 0; i < rgb.size(); i += 3) cmyk.insert(cmyk.end(), {rgb[i], rgb[i + 1], rgb[i + 2], 255});
    return encode_jpeg(cmyk, kHeight, kWidth, layout);
  }
  return encode_jpeg(rgb, kHeight, kWidth, layout);
}

void append_to_vector(png_structp png, png_bytep data, size_t n) {
  auto* out = static_cast<Pixels*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + n);
}

// Encodes rows already laid out as the PNG stores them (16-bit samples big-endian).
Pixels encode_png(const Pixels& data, int64_t height, int64_t width, int color_type, int bit_depth,
                  bool interlaced = false, const std::vector<png_color>& palette = {},
                  const std::vector<png_byte>& palette_alpha = {}) {
  Pixels out;
  std::vector<png_bytep> rows(height);
  const size_t row_bytes = data.size() / height;
  for (int64_t y = 0; y < height; ++y) rows[y] = const_cast<png_bytep>(&data[y * row_bytes]);
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    ADD_FAILURE() << "libpng could not encode the test image";
    return {};
  }
  png_set_write_fn(png, &out, append_to_vector, nullptr);
  png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height),
               bit_depth, color_type, interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (!palette.empty()) png_set_PLTE(png, info, palette.data(), static_cast<int>(palette.size()));
  if (!palette_alpha.empty()) {
    png_set_tRNS(png, info, palette_alpha.data(), static_cast<int>(palette_alpha.size()), nullptr);
  }
  png_write_info(png, info);
  png_write_image(png, rows.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

Pixels encode_png_rgb(const Pixels& rgb, bool interlaced = false) {
  return encode_png(rgb, kHeight, kWidth, PNG_COLOR_TYPE_RGB, 8, interlaced);
}

// ---- decoding helpers --------------------------------------------------------------------------

DecodeOptions options_for(Region region, int channels = 3) {
  DecodeOptions options;
  options.region = region;
  options.channels = channels;
  return options;
}

Image decode(const Pixels& bytes, const DecodeOptions& options = {}, double* scale = nullptr) {
  Image out;
  const double s = decode_image(bytes.data(), bytes.size(), options, out, "test.img");
  if (scale != nullptr) *scale = s;
  EXPECT_EQ(out.pixels.size(), size_t(out.height * out.width * out.channels));
  return out;
}

std::string decode_error(const Pixels& bytes, const DecodeOptions& options, const std::string& name) {
  return error_of([&] {
    Image out;
    decode_image(bytes.data(), bytes.size(), options, out, name);
  });
}

// Regions at offsets and sizes that are, and are not, aligned to JPEG's 8- and 16-pixel blocks,
// including ones that touch the right and bottom edges.
std::vector<Region> test_regions() {
  std::vector<Region> regions;
  const int64_t xs[] = {0, 1, 7, 15, 16, 17, 33, 62};
  const int64_t ys[] = {0, 1, 8, 11, 16, 31, 52};
  const std::pair<int64_t, int64_t> sizes[] = {{1, 1}, {2, 3}, {17, 9}, {61, 45}};
  for (int64_t x : xs) {
    for (int64_t y : ys) {
      for (auto [w, h] : sizes) {
        if (x + w <= kWidth && y + h <= kHeight) regions.push_back({x, y, w, h});
      }
    }
  }
  regions.push_back({kWidth - 61, kHeight - 45, 61, 45});
  regions.push_back({kWidth - 1, kHeight - 1, 1, 1});
  regions.push_back({0, 40, kWidth, 13});  // full width: decoded straight into the output
  return regions;
}

// ---- sniffing and probing ----------------------------------------------------------------------

TEST(DecodeSniff, RecognisesMagicBytes) {
  const Pixels rgb = smooth_rgb(kHeight, kWidth);
  const Pixels jpeg = encode_jpeg(rgb, JpegLayout::Yuv420);
  const Pixels png = encode_png_rgb(rgb);
  EXPECT_EQ(sniff_format(jpeg.data(), jpeg.size()), ImageFormat::Jpeg);
  EXPECT_EQ(sniff_format(png.data(), png.size()), ImageFormat::Png);
  EXPECT_EQ(sniff_format(png.data(), 7), ImageFormat::Unknown);  // PNG's signature is 8 bytes
  EXPECT_EQ(sniff_format(jpeg.data(), 2), ImageFormat::Unknown);
  EXPECT_EQ(sniff_format(nullptr, 0), ImageFormat::Unknown);
  const uint8_t gif[] = {'G', 'I', 'F', '8', '9', 'a', 0, 0};
  EXPECT_EQ(sniff_format(gif, sizeof gif), ImageFormat::Unknown);
}

TEST(DecodeProbe, ReadsSizeChannelsAndFormatFromTheHeader) {
  const Pixels rgb = smooth_rgb(kHeight, kWidth);
  struct Case {
    Pixels bytes;
    int64_t channels;
    ImageFormat format;
  };
  Pixels rgba;
  for (size_t i = 0; i < rgb.size(); i += 3) rgba.insert(rgba.end(), {rgb[i], rgb[i + 1], rgb[i + 2], 200});
  const Case cases[] = {
      {encode_jpeg(rgb, JpegLayout::Yuv420), 3, ImageFormat::Jpeg},
      {encode_jpeg(rgb, JpegLayout::Progressive420), 3, ImageFormat::Jpeg},
      {encode_jpeg(rgb, JpegLayout::Gray), 1, ImageFormat::Jpeg},
      {encode_jpeg(rgb, JpegLayout::Cmyk), 4, ImageFormat::Jpeg},
      {encode_png_rgb(rgb), 3, ImageFormat::Png},
      {encode_png(rgba, kHeight, kWidth, PNG_COLOR_TYPE_RGB_ALPHA, 8), 4, ImageFormat::Png},
      {encode_png(to_gray(rgb), kHeight, kWidth, PNG_COLOR_TYPE_GRAY, 8), 1, ImageFormat::Png},
  };
  for (const Case& c : cases) {
    const ImageInfo info = probe_image(c.bytes.data(), c.bytes.size(), "probe.img");
    EXPECT_EQ(info.width, kWidth);
    EXPECT_EQ(info.height, kHeight);
    EXPECT_EQ(info.channels, c.channels);
    EXPECT_EQ(info.format, c.format);
  }
}

// ---- PNG -------------------------------------------------------------------------------------------

TEST(DecodePng, FullDecodeIsExact) {
  const Pixels rgb = smooth_rgb(kHeight, kWidth);
  const Pixels png = encode_png_rgb(rgb);
  double scale = 0;
  const Image image = decode(png, {}, &scale);
  EXPECT_EQ(scale, 1.0);
  EXPECT_EQ(image.width, kWidth);
  EXPECT_EQ(image.height, kHeight);
  EXPECT_EQ(image.channels, 3);
  EXPECT_EQ(image.pixels, rgb);

  const Image gray = decode(png, options_for({}, 1));
  EXPECT_EQ(gray.channels, 1);
  EXPECT_EQ(gray.pixels, to_gray(rgb));  // the same BT.601 weights and rounding as libjpeg
}

TEST(DecodePng, ConvertsEveryLayoutTo8BitRgbOrGray) {
  const Pixels rgb = smooth_rgb(kHeight, kWidth);
  const Pixels gray = to_gray(rgb);
  const int64_t n = kWidth * kHeight;

  Pixels rgba, rgb16, gray_alpha, gray_as_rgb;
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* p = &rgb[3 * i];
    rgba.insert(rgba.end(), {p[0], p[1], p[2], static_cast<uint8_t>(i % 256)});  // alpha dropped
    for (int c = 0; c < 3; ++c) rgb16.insert(rgb16.end(), {p[c], p[c]});  // v * 257, big-endian
    gray_alpha.insert(gray_alpha.end(), {gray[i], static_cast<uint8_t>(255 - i % 256)});
    gray_as_rgb.insert(gray_as_rgb.end(), {gray[i], gray[i], gray[i]});
  }
  // A 4-colour palette with a tRNS chunk (which libpng would expand to alpha).
  const std::vector<png_color> palette = {{255, 0, 0}, {0, 128, 0}, {10, 20, 30}, {250, 250, 250}};
  Pixels indices(n), palette_rgb;
  for (int64_t i = 0; i < n; ++i) {
    indices[i] = static_cast<uint8_t>((i / 7) % 4);
    const png_color& c = palette[indices[i]];
    palette_rgb.insert(palette_rgb.end(), {c.red, c.green, c.blue});
  }

  struct Case {
    const char* what;
    Pixels png;
    Pixels expected_rgb;
  };
  const Case cases[] = {
      {"RGBA 8", encode_png(rgba, kHeight, kWidth, PNG_COLOR_TYPE_RGB_ALPHA, 8), rgb},
      {"RGB 16", encode_png(rgb16, kHeight, kWidth, PNG_COLOR_TYPE_RGB, 16), rgb},
      {"gray 8", encode_png(gray, kHeight, kWidth, PNG_COLOR_TYPE_GRAY, 8), gray_as_rgb},
      {"gray+alpha 8", encode_png(gray_alpha, kHeight, kWidth, PNG_COLOR_TYPE_GRAY_ALPHA, 8), gray_as_rgb},
      {"palette + tRNS", encode_png(indices, kHeight, kWidth, PNG_COLOR_TYPE_PALETTE, 8, false, palette, {0, 128}),
       palette_rgb},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const Image image = decode(c.png);
    EXPECT_EQ(image.channels, 3);
    EXPECT_EQ(image.pixels, c.expected_rgb);
    EXPECT_EQ(decode(c.png, options_for({}, 1)).pixels, to_gray(c.expected_rgb));
  }
}

TEST(DecodePng, RegionIsCutFromTheImageInterlacedOrNot) {
  const Pixels rgb = smooth_rgb(kHeight, kWidth);
  for (bool interlaced : {false, true}) {
    SCOPED_TRACE(interlaced ? "Adam7" : "not interlaced");
    const Pixels png = encode_png_rgb(rgb, interlaced);
    for (const Region& r : {Region{17, 11, 61, 45}, Region{kWidth - 5, kHeight - 3, 5, 3}}) {
      DecodeOptions options = options_for(r);
      options.min_width = r.width / 2;  // no effect on PNG: there is no scaled decode
      options.min_height = r.height / 2;
      double scale = 0;
      const Image image = decode(png, options, &scale);
      EXPECT_EQ(scale, 1.0);
      EXPECT_EQ(image.width, r.width);
      EXPECT_EQ(image.height, r.height);
      EXPECT_EQ(image.pixels, cut(rgb, kWidth, 3, r));
    }
  }
}

// ---- JPEG ------------------------------------------------------------------------------------------

TEST(DecodeJpeg, FullDecodeIsCloseToTheSource) {
  const Pixels rgb = smooth_rgb(kHeight, kWidth);
  for (JpegLayout layout : {JpegLayout::Yuv420, JpegLayout::Yuv422, JpegLayout::Yuv444,
                            JpegLayout::Progressive420, JpegLayout::Cmyk}) {
    SCOPED_TRACE(layout_name(layout));
    double scale = 0;
    const Image image = decode(encode_jpeg(rgb, layout), {}, &scale);
    EXPECT_EQ(scale, 1.0);
    EXPECT_EQ(image.width, kWidth);
    EXPECT_EQ(image.height, kHeight);
    EXPECT_EQ(image.channels, 3);
    EXPECT_LT(mean_abs_error(image.pixels, rgb), kJpegTolerance);
  }
}

TEST(DecodeJpeg, GrayscaleOutput) {
  const Pixels rgb = smooth_rgb(kHeight, kWidth);
  const Pixels gray = to_gray(rgb);
  // A color JPEG to gray (libjpeg keeps Y and never decodes chroma), a gray JPEG to gray and to
  // RGB, and a CMYK JPEG to gray (converted by Stoker).
  const Image from_color = decode(encode_jpeg(rgb, JpegLayout::Yuv420), options_for({}, 1));
  EXPECT_EQ(from_color.channels, 1);
  EXPECT_LT(mean_abs_error(from_color.pixels, gray), kJpegTolerance);

  const Pixels gray_jpeg = encode_jpeg(rgb, JpegLayout::Gray);
  const Image gray_out = decode(gray_jpeg, options_for({}, 1));
  EXPECT_LT(mean_abs_error(gray_out.pixels, gray), kJpegTolerance);
  const Image rgb_out = decode(gray_jpeg);
  ASSERT_EQ(rgb_out.channels, 3);
  Pixels replicated;
  for (uint8_t v : gray_out.pixels) replicated.insert(replicated.end(), {v, v, v});
  EXPECT_EQ(rgb_out.pixels, replicated);

  const Image from_cmyk = decode(encode_jpeg(rgb, JpegLayout::Cmyk), options_for({}, 1));
  EXPECT_LT(mean_abs_error(from_cmyk.pixels, gray), kJpegTolerance);
}

// At full scale a region decode (crop + skip) must equal the region cut from a full decode, bit
// for bit, wherever the region lies relative to the 8/16-pixel blocks.
TEST(DecodeJpeg, RegionEqualsTheSameRegionOfAFullDecode) {
  const Pixels rgb = smooth_rgb(kHeight, kWidth);
  for (JpegLayout layout : {JpegLayout::Yuv420, JpegLayout::Yuv422, JpegLayout::Yuv444,
                            JpegLayout::Progressive420, JpegLayout::Gray, JpegLayout::Cmyk}) {
    SCOPED_TRACE(layout_name(layout));
    const Pixels jpeg = encode_jpeg(rgb, layout);
    for (int channels : {3, 1}) {
      const Image full = decode(jpeg, options_for({}, channels));
      for (const Region& r : test_regions()) {
        double scale = 0;
        const Image part = decode(jpeg, options_for(r, channels), &scale);
        ASSERT_EQ(scale, 1.0);
        ASSERT_EQ(part.width, r.width);
        ASSERT_EQ(part.height, r.height);
        ASSERT_EQ(part.channels, channels);
        ASSERT_EQ(part.pixels, cut(full.pixels, kWidth, channels, r))
            << "region " << r.width << "x" << r.height << " at " << r.x << "," << r.y
            << ", channels " << channels;
      }
    }
  }
}

TEST(DecodeJpeg, ScaledDecodeUsesTheSmallestScaleThatKeepsTheMinimumSize) {
  const Pixels rgb = smooth_rgb(kHeight, kWidth);
  const Pixels jpeg = encode_jpeg(rgb, JpegLayout::Yuv420);
  struct Case {
    int64_t min_width, min_height;
    int n;                          // expected scale n/8: 1, 2, 4 or 8
    int64_t out_width, out_height;  // round(123 * n/8), round(97 * n/8)
  };
  const Case cases[] = {
      {61, 48, 4, 62, 49},    // half the image: 1/2 (123/2 = 61.5 rounds up)
      {61, 0, 4, 62, 49},     // only the width constrained
      {30, 24, 2, 31, 24},    // a quarter: 1/4
      {10, 10, 1, 15, 12},    // 1/8: 15.4 x 12.1 (libjpeg's own output is 16 x 13)
      {40, 30, 4, 62, 49},    // 3/8 would do, but 1/2 is faster: only 1/8, 1/4, 1/2 are used
      {0, 49, 8, 123, 97},    // 97/2 = 48.5 < 49: 5/8 would do, full scale is faster
      {123, 97, 8, 123, 97},  // the full size: no reduction
      {500, 10, 8, 123, 97},  // more than the image: full scale, never enlarged
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "min " << c.min_width << "x" << c.min_height);
    DecodeOptions options;
    options.min_width = c.min_width;
    options.min_height = c.min_height;
    double scale = 0;
    const Image image = decode(jpeg, options, &scale);
    EXPECT_EQ(scale, c.n / 8.0);
    EXPECT_EQ(image.width, c.out_width);
    EXPECT_EQ(image.height, c.out_height);
    EXPECT_GE(image.width, std::min(c.min_width, kWidth));
    EXPECT_GE(image.height, std::min(c.min_height, kHeight));
    const Pixels reference = box_scaled(rgb, kWidth, kHeight, c.n, image.width, image.height);
    EXPECT_LT(mean_abs_error(image.pixels, reference), kScaledJpegTolerance);
  }
}

// A scaled region is the matching part of the scaled full image: it starts at floor(x * s) and
// is round(width * s) wide. Checked against a scaled full decode, bit for bit.
TEST(DecodeJpeg, ScaledRegionEqualsTheSamePartOfAScaledFullDecode) {
  const Pixels rgb = smooth_rgb(kHeight, kWidth);
  for (JpegLayout layout : {JpegLayout::Yuv420, JpegLayout::Yuv444, JpegLayout::Progressive420}) {
    SCOPED_TRACE(layout_name(layout));
    const Pixels jpeg = encode_jpeg(rgb, layout);
    for (int n : {1, 2, 4}) {
      DecodeOptions whole;
      whole.min_width = kWidth * n / 8;  // asks for exactly scale n/8
      whole.min_height = 1;
      double full_scale = 0;
      const Image full = decode(jpeg, whole, &full_scale);
      ASSERT_EQ(full_scale, n / 8.0);
      for (const Region& r : {Region{17, 11, 61, 45}, Region{33, 8, 80, 80}, Region{62, 52, 61, 45}}) {
        DecodeOptions options = options_for(r);
        options.min_width = r.width * n / 8;
        options.min_height = 1;
        double scale = 0;
        const Image part = decode(jpeg, options, &scale);
        ASSERT_EQ(scale, n / 8.0);
        const Region scaled{r.x * n / 8, r.y * n / 8, (r.width * n + 4) / 8, (r.height * n + 4) / 8};
        ASSERT_EQ(part.width, scaled.width);
        ASSERT_EQ(part.height, scaled.height);
        EXPECT_EQ(part.pixels, cut(full.pixels, full.width, 3, scaled))
            << "n " << n << ", region " << r.width << "x" << r.height << " at " << r.x << "," << r.y;
      }
    }
  }
}

TEST(DecodeJpeg, HalfScaleRegionHasTheRoundedSizeAndLooksRight) {
  const Pixels rgb = smooth_rgb(kHeight, kWidth);
  const Pixels jpeg = encode_jpeg(rgb, JpegLayout::Yuv420);
  DecodeOptions options = options_for({17, 11, 61, 45});
  options.min_width = 30;  // half the region
  options.min_height = 22;
  double scale = 0;
  const Image image = decode(jpeg, options, &scale);
  EXPECT_EQ(scale, 0.5);
  EXPECT_EQ(image.width, 31);   // round(30.5)
  EXPECT_EQ(image.height, 23);  // round(22.5)
  // It covers source pixels from (16, 10): floor(17 / 2) * 2, floor(11 / 2) * 2.
  const Pixels half = box_scaled(rgb, kWidth, kHeight, 4, 62, 49);
  EXPECT_LT(mean_abs_error(image.pixels, cut(half, 62, 3, {8, 5, 31, 23})), kScaledJpegTolerance);
}

// ---- reuse -------------------------------------------------------------------------------------

TEST(DecodeImage, ReusesTheOutputBufferWithoutReallocating) {
  const Pixels rgb = smooth_rgb(kHeight, kWidth);
  const Pixels jpeg = encode_jpeg(rgb, JpegLayout::Yuv420);
  const Pixels png = encode_png_rgb(rgb);
  Image out;
  decode_image(jpeg.data(), jpeg.size(), {}, out, "a.jpg");
  const Image full_copy = out;
  const uint8_t* buffer = out.pixels.data();
  const size_t capacity = out.pixels.capacity();

  decode_image(jpeg.data(), jpeg.size(), options_for({5, 5, 20, 10}), out, "a.jpg");
  EXPECT_EQ(out.width, 20);
  EXPECT_EQ(out.height, 10);
  EXPECT_EQ(out.pixels.size(), 20u * 10 * 3);
  EXPECT_EQ(out.pixels, cut(full_copy.pixels, kWidth, 3, {5, 5, 20, 10}));
  decode_image(png.data(), png.size(), options_for({}, 1), out, "a.png");
  EXPECT_EQ(out.pixels, to_gray(rgb));
  decode_image(jpeg.data(), jpeg.size(), {}, out, "a.jpg");
  EXPECT_EQ(out.pixels, full_copy.pixels);
  EXPECT_EQ(out.pixels.data(), buffer);
  EXPECT_EQ(out.pixels.capacity(), capacity);
}

// ---- errors ------------------------------------------------------------------------------------

TEST(DecodeErrors, TruncatedJpegIsAnErrorNotAGrayImage) {
  const Pixels rgb = smooth_rgb(kHeight, kWidth);
  for (JpegLayout layout : {JpegLayout::Yuv420, JpegLayout::Progressive420}) {
    SCOPED_TRACE(layout_name(layout));
    const Pixels jpeg = encode_jpeg(rgb, layout);
    const Pixels half(jpeg.begin(), jpeg.begin() + jpeg.size() / 2);
    const std::string message = decode_error(half, {}, "cats/0001.jpg");
    EXPECT_CONTAINS(message, "cats/0001.jpg");
    EXPECT_CONTAINS(message, "truncated or corrupt");
    // Only the header survives: probing fails too.
    const Pixels stub(jpeg.begin(), jpeg.begin() + 20);
    EXPECT_CONTAINS(error_of([&] { probe_image(stub.data(), stub.size(), "cats/0002.jpg"); }),
                    "cats/0002.jpg");
  }
}

TEST(DecodeErrors, TheDecompressorWorksAgainAfterAnError) {
  const Pixels rgb = smooth_rgb(kHeight, kWidth);
  const Pixels jpeg = encode_jpeg(rgb, JpegLayout::Yuv420);
  const Image before = decode(jpeg, options_for({17, 11, 61, 45}));
  const Pixels half(jpeg.begin(), jpeg.begin() + jpeg.size() / 2);
  decode_error(half, {}, "broken.jpg");
  decode_error(jpeg, options_for({100, 0, 50, 10}), "outside.jpg");  // fails after the header
  EXPECT_EQ(decode(jpeg, options_for({17, 11, 61, 45})).pixels, before.pixels);
}

TEST(DecodeErrors, RandomBytesAreNotAnImage) {
  std::mt19937 rng(7);
  Pixels noise(1000);
  for (uint8_t& b : noise) b = static_cast<uint8_t>(rng());
  noise[0] = 0x12;
  const std::string message = decode_error(noise, {}, "data/noise.bin");
  EXPECT_CONTAINS(message, "data/noise.bin");
  EXPECT_CONTAINS(message, "not a JPEG or PNG");
  EXPECT_CONTAINS(message, "12 ");
  EXPECT_CONTAINS(error_of([&] { probe_image(noise.data(), noise.size(), "data/noise.bin"); }),
                  "not a JPEG or PNG");
  EXPECT_CONTAINS(decode_error({}, {}, "empty.jpg"), "empty");

  // JPEG's magic followed by noise: libjpeg's own complaint, still naming the file.
  Pixels fake = noise;
  fake[0] = 0xff, fake[1] = 0xd8, fake[2] = 0xff;
  EXPECT_CONTAINS(decode_error(fake, {}, "fake.jpg"), "fake.jpg");
}

TEST(DecodeErrors, TruncatedPngIsAnError) {
  const Pixels png = encode_png_rgb(smooth_rgb(kHeight, kWidth));
  const Pixels half(png.begin(), png.begin() + png.size() / 2);
  const std::string message = decode_error(half, {}, "dogs/7.png");
  EXPECT_CONTAINS(message, "dogs/7.png");
  EXPECT_CONTAINS(message, "truncated or corrupt");

  Pixels flipped = png;  // a damaged byte inside the image data fails its chunk's CRC
  flipped[png.size() / 2] ^= 0x55;
  EXPECT_CONTAINS(decode_error(flipped, {}, "dogs/8.png"), "dogs/8.png");
}

TEST(DecodeErrors, RegionOutsideTheImageNamesBothSizes) {
  const Pixels rgb = smooth_rgb(kHeight, kWidth);
  for (const Pixels& bytes : {encode_jpeg(rgb, JpegLayout::Yuv420), encode_png_rgb(rgb)}) {
    const std::string message = decode_error(bytes, options_for({100, 50, 30, 20}), "x.img");
    EXPECT_CONTAINS(message, "x.img");
    EXPECT_CONTAINS(message, "30x20");
    EXPECT_CONTAINS(message, "123x97");
    EXPECT_CONTAINS(decode_error(bytes, options_for({-1, 0, 10, 10}), "x.img"), "123x97");
    EXPECT_CONTAINS(decode_error(bytes, options_for({0, 0, 10, 0}), "x.img"), "x.img");
    EXPECT_CONTAINS(decode_error(bytes, options_for({5, 0, 0, 0}), "x.img"), "whole image");
  }
}

TEST(DecodeErrors, BadOptionsAreRejected) {
  const Pixels jpeg = encode_jpeg(smooth_rgb(kHeight, kWidth), JpegLayout::Yuv420);
  EXPECT_CONTAINS(decode_error(jpeg, options_for({}, 2), "a.jpg"), "channels must be 3");
  DecodeOptions negative;
  negative.min_width = -1;
  EXPECT_CONTAINS(decode_error(jpeg, negative, "a.jpg"), "negative");
}


// A valid image whose header claims 60000 x 60000 pixels (3.6 gigapixels; a decompression bomb) is
// refused by probe and decode before anything is allocated, naming the file and the limit; a
// larger limit lets the header through.
Pixels with_png_size(Pixels png, uint32_t width, uint32_t height) {
  // IHDR: 8-byte signature, 4-byte length, "IHDR", width, height (big-endian), ..., CRC over type+data.
  auto put = [&](size_t at, uint32_t v) {
    for (int k = 0; k < 4; ++k) png[at + k] = static_cast<uint8_t>(v >> (24 - 8 * k));
  };
  put(16, width);
  put(20, height);
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32(crc, png.data() + 12, 4 + 13);
  put(29, static_cast<uint32_t>(crc));
  return png;
}

Pixels with_jpeg_size(Pixels jpeg, uint16_t width, uint16_t height) {
  // The SOF0/SOF2 segment: FF C0|C2, length (2), precision (1), height (2), width (2).
  for (size_t i = 2; i + 8 < jpeg.size(); ++i) {
    if (jpeg[i] == 0xff && (jpeg[i + 1] == 0xc0 || jpeg[i + 1] == 0xc2)) {
      jpeg[i + 5] = static_cast<uint8_t>(height >> 8);
      jpeg[i + 6] = static_cast<uint8_t>(height);
      jpeg[i + 7] = static_cast<uint8_t>(width >> 8);
      jpeg[i + 8] = static_cast<uint8_t>(width);
      return jpeg;
    }
  }
  ADD_FAILURE() << "no SOF segment";
  return jpeg;
}

// Found by fuzz_image (fuzz/regressions/image/): a 68-byte PNG whose sPLT chunk declares 712 MB
// made libpng allocate all of it, for the probe and again for the decode; under the fuzzer it took
// seconds per image. libpng's allocations above 16 MB are now refused, and the error says why.
TEST(DecodeErrors, APngChunkDeclaringHundredsOfMegabytesIsRefusedUnread) {
  const std::string bytes = stoker::testing::read_bytes(std::filesystem::path(STOKER_SOURCE_DIR) /
                                                        "fuzz/regressions/image/timeout-png-splt-declares-712mb");
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  const std::string probe = error_of([&] { probe_image(data, bytes.size(), "tiny.png"); });
  EXPECT_CONTAINS(probe, "tiny.png: the PNG data is truncated or corrupt");
  EXPECT_CONTAINS(probe, "a chunk declares 712769792 bytes, more than the 16 MB Stoker allows");
  Image out;
  EXPECT_CONTAINS(error_of([&] { decode_image(data, bytes.size(), DecodeOptions(), out, "tiny.png"); }),
                  "a chunk declares 712769792 bytes");
}

TEST(DecodeErrors, DecompressionBombsAreRefusedBeforeDecoding) {
  const Pixels rgb = smooth_rgb(kHeight, kWidth);
  const Pixels png = with_png_size(encode_png_rgb(rgb), 60000, 60000);
  const Pixels jpeg = with_jpeg_size(encode_jpeg(rgb, JpegLayout::Yuv420), 60000, 60000);
  for (const Pixels* bytes : {&png, &jpeg}) {
    const std::string probe = stoker::testing::error_of([&] { probe_image(bytes->data(), bytes->size(), "bomb.img"); });
    EXPECT_CONTAINS(probe, "bomb.img: the header says 60000x60000 = 3600000000 pixels, more than max_image_pixels (89478485)");
    Image out;
    EXPECT_CONTAINS(stoker::testing::error_of([&] { decode_image(bytes->data(), bytes->size(), DecodeOptions(), out, "bomb.img"); }),
                    "more than max_image_pixels");
    EXPECT_TRUE(out.pixels.empty()) << "nothing was allocated for the image";
    const ImageInfo info = probe_image(bytes->data(), bytes->size(), "bomb.img", int64_t(4) << 30);
    EXPECT_EQ(info.width, 60000);
    EXPECT_EQ(info.height, 60000);
  }
}

}  // namespace
}  // namespace stoker::data
