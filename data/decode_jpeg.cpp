// JPEG decoding through libjpeg-turbo's libjpeg API: scaled IDCT, jpeg_crop_scanline for the
// columns, jpeg_skip_scanlines for the rows above the region, and nothing below it.
//
// libjpeg reports errors by longjmp. Every call into it sits in a small member function that arms
// setjmp first and, when the jump comes back, throws a stoker::Error naming the image. No C++
// object with a destructor lives in the library frames a longjmp crosses.
#include <algorithm>
#include <csetjmp>
#include <cstdio>  // jpeglib.h uses FILE without including stdio.h
#include <cstring>

#include <jpeglib.h>
#include <jerror.h>  // after jpeglib.h: the JERR_/JWRN_ message codes

#include "common/error.h"
#include "data/decode_detail.h"

namespace stoker::data::detail {
namespace {
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

}  // namespace

ImageInfo probe_jpeg(const uint8_t* bytes, size_t size, const std::string& name) {
  JpegReader jpeg(bytes, size, name);
  ImageInfo info;
  info.format = ImageFormat::Jpeg;
  info.width = jpeg.info().image_width;
  info.height = jpeg.info().image_height;
  info.channels = jpeg.info().num_components;
  return info;
}

double decode_jpeg(const uint8_t* bytes, size_t size, const DecodeOptions& options, Image& out,
                   const std::string& name) {
  JpegReader jpeg(bytes, size, name);
  jpeg_decompress_struct& info = jpeg.info();
  check_image_size(info.image_width, info.image_height, options.max_pixels, name);
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

}  // namespace stoker::data::detail
