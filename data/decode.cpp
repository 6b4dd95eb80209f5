// Image decoding: JPEG through libjpeg-turbo's libjpeg API (scaled IDCT, jpeg_crop_scanline for the
// columns, jpeg_skip_scanlines for the rows above the region, and nothing below it) and PNG through
// libpng (rows decoded down to the bottom of the region, then cut).
//
// Both libraries report errors by longjmp. Every call into them sits in a small member function
// that arms setjmp first and, when the jump comes back, throws a stoker::Error naming the image.
// No C++ object with a destructor lives in the library frames a longjmp crosses.
#include "data/decode.h"

#include <algorithm>
#include <csetjmp>
#include <cstdio>  // jpeglib.h uses FILE without including stdio.h
#include <cstring>

#include <jpeglib.h>
#include <jerror.h>  // after jpeglib.h: the JERR_/JWRN_ message codes
#include <png.h>

#include "common/error.h"

namespace stoker::data {
namespace {

// Larger images are refused before anything is allocated for them: a corrupt or hostile header
// must not make a loader worker allocate gigabytes. 2^29 pixels is, say, 23170 x 23170.
constexpr int64_t kMaxPixels = int64_t(1) << 29;

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

void check_image_size(int64_t width, int64_t height, const std::string& name) {
  STOKER_CHECK(width > 0 && height > 0, "{}: the header gives an empty {}x{} image; the file is corrupt",
               name, width, height);
  STOKER_CHECK(width * height <= kMaxPixels,
               "{}: the image is {}x{} pixels, more than the {} pixels Stoker decodes; the header may "
               "be corrupt, or the image must be made smaller first",
               name, width, height, kMaxPixels);
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

// A run of pixels along one axis.
struct Span {
  int64_t start = 0, size = 0;
};

// Maps [start, start + size) of the full image to the image scaled by n/8, whose extent along
// this axis is `scaled_extent` (libjpeg rounds it up): floor(start * s), round(size * s), at least
// one pixel, kept inside the scaled image.
Span scale_span(int64_t start, int64_t size, int n, int64_t scaled_extent) {
  Span s;
  s.size = std::clamp<int64_t>((size * n + 4) / 8, 1, scaled_extent);
  s.start = std::min(start * n / 8, scaled_extent - s.size);
  return s;
}

// ---- JPEG ------------------------------------------------------------------------------------------

// libjpeg's error manager, extended with the way back into our code.
struct JpegErrorManager {
  jpeg_error_mgr pub;  // first member: libjpeg sees only this part
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX] = {};
  bool corrupt_data = false;  // the failure was a corrupt-data warning turned into an error
};

// libjpeg's fatal-error hook; it must not return.
[[noreturn]] void on_jpeg_error(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// libjpeg's message hook. Level -1 is a warning, which for libjpeg means damaged data that it
// papers over (a truncated file decodes with its missing part gray). For a training set that is
// an error. Two warnings are about metadata only and leave the pixels intact; those pass.
void on_jpeg_message(j_common_ptr cinfo, int msg_level) {
  if (msg_level >= 0) return;  // trace output
  const int code = cinfo->err->msg_code;
  if (code == JWRN_JFIF_MAJOR || code == JWRN_ADOBE_XFORM) return;
  reinterpret_cast<JpegErrorManager*>(cinfo->err)->corrupt_data = true;
  on_jpeg_error(cinfo);
}

// libjpeg errors that mean "valid but not supported" rather than "damaged".
bool is_unsupported(int code) {
  switch (code) {
    case JERR_ARITH_NOTIMPL:
    case JERR_BAD_PRECISION:
    case JERR_CCIR601_NOTIMPL:
    case JERR_COMPONENT_COUNT:
    case JERR_CONVERSION_NOTIMPL:
    case JERR_EMPTY_IMAGE:
    case JERR_FRACT_SAMPLE_NOTIMPL:
    case JERR_IMAGE_TOO_BIG:
    case JERR_NOTIMPL:
    case JERR_NOT_COMPILED:
    case JERR_SOF_UNSUPPORTED:
    case JERR_WIDTH_OVERFLOW:
      return true;
    default:
      return false;
  }
}

// One libjpeg decompressor per thread, reused from image to image: jpeg_abort_decompress returns
// it to its idle state after each image (read to the bottom of the region, abandoned, or failed)
// and libjpeg keeps its permanent allocations. Destroyed when the thread ends.
struct JpegDecompressor {
  jpeg_decompress_struct cinfo{};
  JpegErrorManager err;

  JpegDecompressor() {
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = on_jpeg_error;
    err.pub.emit_message = on_jpeg_message;
    if (setjmp(err.jump)) {
      jpeg_destroy_decompress(&cinfo);
      STOKER_FAIL("cannot create a JPEG decompressor (libjpeg: {})", err.message);
    }
    jpeg_create_decompress(&cinfo);
  }
  ~JpegDecompressor() { jpeg_destroy_decompress(&cinfo); }
  JpegDecompressor(const JpegDecompressor&) = delete;
  JpegDecompressor& operator=(const JpegDecompressor&) = delete;

  static JpegDecompressor& for_this_thread() {
    thread_local JpegDecompressor decompressor;
    return decompressor;
  }
};

// One image on this thread's decompressor: reads the header on construction, and aborts the
// decompression (so rows below the region are never decoded) when it goes away.
class JpegReader {
 public:
  JpegReader(const uint8_t* bytes, size_t size, const std::string& name)
      : d_(JpegDecompressor::for_this_thread()), cinfo_(&d_.cinfo), name_(name) {
    d_.err.corrupt_data = false;
    if (setjmp(d_.err.jump)) fail();
    jpeg_mem_src(cinfo_, bytes, static_cast<unsigned long>(size));
    jpeg_read_header(cinfo_, TRUE);
  }
  ~JpegReader() { jpeg_abort_decompress(cinfo_); }
  JpegReader(const JpegReader&) = delete;
  JpegReader& operator=(const JpegReader&) = delete;

  jpeg_decompress_struct& info() { return *cinfo_; }

  // Starts decompression with the parameters set on info() (scale, output color space).
  void start() {
    if (setjmp(d_.err.jump)) fail();
    jpeg_start_decompress(cinfo_);
  }

  // Limits decoding to columns [*x, *x + *width) of the scaled image. libjpeg moves *x left to an
  // iMCU boundary and widens *width to match; the rows it returns then start at the new *x.
  void crop(JDIMENSION* x, JDIMENSION* width) {
    if (setjmp(d_.err.jump)) fail();
    jpeg_crop_scanline(cinfo_, x, width);
  }

  void skip(JDIMENSION rows) {
    if (setjmp(d_.err.jump)) fail();
    if (rows > 0) jpeg_skip_scanlines(cinfo_, rows);
  }

  // Reads the next `rows` scanlines and converts columns [first, first + width) of each into
  // consecutive rows of `dst`. Each scanline lands in `row` (output_width pixels), or straight in
  // `dst` when `direct` (the scanline is exactly one output row).
  void read_rows(int64_t rows, uint8_t* row, int64_t first, int64_t width, uint8_t* dst,
                 int dst_channels, bool direct) {
    if (setjmp(d_.err.jump)) fail();
    const int src_channels = cinfo_->output_components;
    const bool adobe_inverted = cinfo_->saw_Adobe_marker;
    const size_t dst_row_bytes = static_cast<size_t>(width) * dst_channels;
    for (int64_t r = 0; r < rows; ++r) {
      uint8_t* dst_row = dst + r * dst_row_bytes;
      JSAMPROW target = direct ? dst_row : row;
      jpeg_read_scanlines(cinfo_, &target, 1);
      if (!direct) {
        convert_pixels(row + first * src_channels, src_channels, adobe_inverted, dst_row,
                       dst_channels, width);
      }
    }
  }

 private:
  // Called after libjpeg jumped back: resets the decompressor and throws.
  [[noreturn]] void fail() {
    const int code = d_.err.pub.msg_code;
    const bool corrupt = d_.err.corrupt_data;
    jpeg_abort_decompress(cinfo_);
    if (!corrupt && is_unsupported(code)) {
      STOKER_FAIL("{}: this JPEG uses a feature Stoker cannot decode (libjpeg: {}); convert it to "
                  "an 8-bit baseline or progressive JPEG, or to PNG, or remove it from the data set",
                  name_, d_.err.message);
    }
    STOKER_FAIL("{}: the JPEG data is truncated or corrupt (libjpeg: {}); re-copy the file or "
                "remove it from the data set",
                name_, d_.err.message);
  }

  JpegDecompressor& d_;
  j_decompress_ptr cinfo_;
  const std::string& name_;
};

double decode_jpeg(const uint8_t* bytes, size_t size, const DecodeOptions& options, Image& out,
                   const std::string& name) {
  JpegReader jpeg(bytes, size, name);
  jpeg_decompress_struct& info = jpeg.info();
  check_image_size(info.image_width, info.image_height, name);
  const Region region = resolve_region(options.region, info.image_width, info.image_height, name);
  const int n = choose_scale(region, options);
  const bool cmyk = info.jpeg_color_space == JCS_CMYK || info.jpeg_color_space == JCS_YCCK;

  info.scale_num = static_cast<unsigned>(n);
  info.scale_denom = 8;
  // The accurate integer IDCT and smooth (fancy) chroma upsampling. Measured on 500x375 4:2:0
  // JPEGs: JDCT_IFAST saves ~4% at a mean error of 1 level (max 4); the merged upsampler was no
  // faster at all. Neither is worth it.
  info.dct_method = JDCT_ISLOW;
  info.do_fancy_upsampling = TRUE;
  // libjpeg converts gray and YCbCr/RGB itself; CMYK it can only hand over as it is.
  info.out_color_space = cmyk ? JCS_CMYK : options.channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg.start();

  const int64_t scaled_width = info.output_width, scaled_height = info.output_height;
  const Span cols = scale_span(region.x, region.width, n, scaled_width);
  const Span rows = scale_span(region.y, region.height, n, scaled_height);

  // Columns: crop with a margin of one column on each side where the image goes on, and at least
  // 8 columns wide. Fancy upsampling of subsampled chroma treats a crop's first and last columns
  // as image edges, and on a crop whose chroma is a single sample wide libjpeg falls back to box
  // upsampling; either way those columns differ from a full decode, so none of them is copied.
  constexpr int64_t kMinCropWidth = 8;
  int64_t crop_begin = std::max<int64_t>(cols.start - 1, 0);
  int64_t crop_end = std::min(cols.start + cols.size + 1, scaled_width);
  if (crop_end - crop_begin < kMinCropWidth) {
    crop_end = std::min(crop_begin + kMinCropWidth, scaled_width);
    crop_begin = std::max<int64_t>(crop_end - kMinCropWidth, 0);
  }
  JDIMENSION crop_x = static_cast<JDIMENSION>(crop_begin);
  JDIMENSION crop_width = static_cast<JDIMENSION>(crop_end - crop_begin);
  jpeg.crop(&crop_x, &crop_width);
  // Rows: skip those above the region (libjpeg keeps the upsampler's context rows right), read
  // the region's rows, and stop; ~JpegReader aborts before any row below is decoded.
  jpeg.skip(static_cast<JDIMENSION>(rows.start));

  out.height = out.width = out.channels = 0;
  out.pixels.resize(static_cast<size_t>(rows.size * cols.size * options.channels));
  const int64_t first = cols.start - crop_x;
  const bool direct = first == 0 && crop_width == cols.size &&
                      info.output_components == options.channels;
  uint8_t* row = direct ? nullptr : scratch(static_cast<size_t>(crop_width) * info.output_components);
  jpeg.read_rows(rows.size, row, first, cols.size, out.pixels.data(), options.channels, direct);

  out.height = rows.size;
  out.width = cols.size;
  out.channels = options.channels;
  return n / 8.0;
}

// ---- PNG -------------------------------------------------------------------------------------------

// The encoded bytes and how far libpng has read.
struct PngSource {
  const uint8_t* data = nullptr;
  size_t size = 0, pos = 0;
};

void read_png_bytes(png_structp png, png_bytep out, size_t n) {
  auto* source = static_cast<PngSource*>(png_get_io_ptr(png));
  if (n > source->size - source->pos) png_error(png, "the data ends early");
  std::memcpy(out, source->data + source->pos, n);
  source->pos += n;
}

constexpr size_t kPngMessageSize = 200;

// libpng's error hook (its error pointer is the reader's message buffer); it must not return.
[[noreturn]] void on_png_error(png_structp png, png_const_charp message) {
  auto* text = static_cast<char*>(png_get_error_ptr(png));
  std::snprintf(text, kPngMessageSize, "%s", message);
  png_longjmp(png, 1);
}

// Warnings concern ancillary chunks (a bad colour profile, say); the pixels are fine.
void on_png_warning(png_structp, png_const_charp) {}

// One PNG being read: libpng's structs, freed when it goes away.
class PngReader {
 public:
  PngReader(const uint8_t* bytes, size_t size, const std::string& name)
      : name_(name), source_{bytes, size, 0} {
    png_ = png_create_read_struct(PNG_LIBPNG_VER_STRING, message_, on_png_error, on_png_warning);
    if (png_ != nullptr) info_ = png_create_info_struct(png_);
    if (info_ == nullptr) {
      png_destroy_read_struct(&png_, nullptr, nullptr);
      STOKER_FAIL("{}: cannot create a PNG decoder (out of memory)", name);
    }
    png_set_read_fn(png_, &source_, read_png_bytes);
  }
  ~PngReader() { png_destroy_read_struct(&png_, &info_, nullptr); }
  PngReader(const PngReader&) = delete;
  PngReader& operator=(const PngReader&) = delete;

  // Reads the chunks up to the image data.
  void read_info() {
    if (setjmp(png_jmpbuf(png_))) fail();
    png_read_info(png_, info_);
  }
  int64_t width() const { return png_get_image_width(png_, info_); }
  int64_t height() const { return png_get_image_height(png_, info_); }
  // The channels the file stores (a palette counts as its RGB colors).
  int stored_channels() const {
    const int color_type = png_get_color_type(png_, info_);
    return color_type == PNG_COLOR_TYPE_PALETTE ? 3 : png_get_channels(png_, info_);
  }

  // Makes libpng hand out 8-bit rows of gray (1 channel, for gray files) or RGB (3, for color
  // and palette files) with no alpha. Returns those channels.
  int set_up_8bit_gray_or_rgb() {
    if (setjmp(png_jmpbuf(png_))) fail();
    const int color_type = png_get_color_type(png_, info_);
    const int bit_depth = png_get_bit_depth(png_, info_);
    if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png_);
    if (color_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png_);
    if (bit_depth == 16) png_set_scale_16(png_);  // rounds; strip_16 would truncate
    // Alpha is dropped, not composited (as PIL's convert("RGB") does): transparent pixels keep the
    // colour stored under them.
    if ((color_type & PNG_COLOR_MASK_ALPHA) || png_get_valid(png_, info_, PNG_INFO_tRNS)) {
      png_set_strip_alpha(png_);
    }
    passes_ = png_set_interlace_handling(png_);
    png_read_update_info(png_, info_);
    return png_get_channels(png_, info_);
  }
  int bit_depth() const { return png_get_bit_depth(png_, info_); }

  // Decodes rows down to the bottom of `region` and converts its pixels into `dst`. An interlaced
  // image is decoded whole (every pass spans all rows) into `image`, which must hold all of it;
  // otherwise `image` holds one row.
  void read_region(const Region& region, uint8_t* image, int src_channels, uint8_t* dst,
                   int dst_channels) {
    if (setjmp(png_jmpbuf(png_))) fail();
    const size_t row_bytes = png_get_rowbytes(png_, info_);
    const size_t dst_row_bytes = static_cast<size_t>(region.width) * dst_channels;
    const int64_t end = region.y + region.height;
    if (passes_ > 1) {
      const int64_t height = png_get_image_height(png_, info_);
      for (int pass = 0; pass < passes_; ++pass) {
        for (int64_t y = 0; y < height; ++y) png_read_row(png_, image + y * row_bytes, nullptr);
      }
      for (int64_t y = region.y; y < end; ++y) {
        convert_pixels(image + y * row_bytes + region.x * src_channels, src_channels, false,
                       dst + (y - region.y) * dst_row_bytes, dst_channels, region.width);
      }
    } else {
      for (int64_t y = 0; y < end; ++y) {
        png_read_row(png_, image, nullptr);
        if (y < region.y) continue;
        convert_pixels(image + region.x * src_channels, src_channels, false,
                       dst + (y - region.y) * dst_row_bytes, dst_channels, region.width);
      }
    }
  }

  bool interlaced() const { return passes_ > 1; }
  size_t row_bytes() const { return png_get_rowbytes(png_, info_); }

 private:
  [[noreturn]] void fail() {
    STOKER_FAIL("{}: the PNG data is truncated or corrupt (libpng: {}); re-copy the file or remove "
                "it from the data set",
                name_, message_);
  }

  const std::string& name_;
  PngSource source_;
  png_structp png_ = nullptr;
  png_infop info_ = nullptr;
  int passes_ = 1;
  char message_[kPngMessageSize] = {};
};

double decode_png(const uint8_t* bytes, size_t size, const DecodeOptions& options, Image& out,
                  const std::string& name) {
  PngReader png(bytes, size, name);
  png.read_info();
  check_image_size(png.width(), png.height(), name);
  const Region region = resolve_region(options.region, png.width(), png.height(), name);
  const int src_channels = png.set_up_8bit_gray_or_rgb();
  STOKER_CHECK((src_channels == 1 || src_channels == 3) && png.bit_depth() == 8,
               "{}: libpng turned this PNG into {} channels of {} bits instead of 8-bit gray or "
               "RGB; please report this as a Stoker bug",
               name, src_channels, png.bit_depth());

  out.height = out.width = out.channels = 0;
  out.pixels.resize(static_cast<size_t>(region.width * region.height * options.channels));
  uint8_t* image = scratch(png.row_bytes() * (png.interlaced() ? png.height() : 1));
  png.read_region(region, image, src_channels, out.pixels.data(), options.channels);

  out.height = region.height;
  out.width = region.width;
  out.channels = options.channels;
  return 1.0;
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

}  // namespace

ImageFormat sniff_format(const uint8_t* bytes, size_t size) {
  static constexpr uint8_t kJpeg[] = {0xff, 0xd8, 0xff};
  static constexpr uint8_t kPng[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (size >= sizeof kJpeg && std::memcmp(bytes, kJpeg, sizeof kJpeg) == 0) return ImageFormat::Jpeg;
  if (size >= sizeof kPng && std::memcmp(bytes, kPng, sizeof kPng) == 0) return ImageFormat::Png;
  return ImageFormat::Unknown;
}

ImageInfo probe_image(const uint8_t* bytes, size_t size, const std::string& name) {
  ImageInfo result;
  result.format = require_format(bytes, size, name);
  if (result.format == ImageFormat::Jpeg) {
    JpegReader jpeg(bytes, size, name);
    result.width = jpeg.info().image_width;
    result.height = jpeg.info().image_height;
    result.channels = jpeg.info().num_components;
  } else {
    PngReader png(bytes, size, name);
    png.read_info();
    result.width = png.width();
    result.height = png.height();
    result.channels = png.stored_channels();
  }
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
