// PNG decoding through libpng: rows decoded down to the bottom of the region, then cut.
//
// libpng reports errors by longjmp. Every call into it sits in a small member function that arms
// setjmp first and, when the jump comes back, throws a stoker::Error naming the image. No C++
// object with a destructor lives in the library frames a longjmp crosses.
#include <algorithm>
#include <csetjmp>
#include <cstdlib>
#include <cstring>

#include <png.h>

#include "common/error.h"
#include "data/decode_detail.h"

namespace stoker::data::detail {
namespace {
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

// libpng allocates some chunks' declared length before reading them (sPLT, text, eXIf, unknown
// chunks; its own chunk size limit does not cover them): a 68-byte file declaring a 712 MB sPLT
// chunk made it allocate 712 MB. No allocation libpng needs for an image comes near this (its
// largest are a row and a colour profile), so larger ones are refused: libpng then skips the chunk
// or fails, and the reader says why. The memory pointer is the reader's record of the refusal.
constexpr png_alloc_size_t kMaxPngAllocation = png_alloc_size_t(16) << 20;

png_voidp capped_png_malloc(png_structp png, png_alloc_size_t size) {
  if (size <= kMaxPngAllocation) return std::malloc(size);
  *static_cast<png_alloc_size_t*>(png_get_mem_ptr(png)) = size;
  return nullptr;
}
void png_free_memory(png_structp, png_voidp p) { std::free(p); }

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
    png_ = png_create_read_struct_2(PNG_LIBPNG_VER_STRING, message_, on_png_error, on_png_warning,
                                    &refused_, capped_png_malloc, png_free_memory);
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
    const std::string refused =
        refused_ == 0 ? "" : fmt::format("; a chunk declares {} bytes, more than the {} MB Stoker allows",
                                         refused_, kMaxPngAllocation >> 20);
    STOKER_FAIL("{}: the PNG data is truncated or corrupt (libpng: {}{}); re-copy the file or remove "
                "it from the data set",
                name_, message_, refused);
  }

  const std::string& name_;
  PngSource source_;
  png_structp png_ = nullptr;
  png_infop info_ = nullptr;
  int passes_ = 1;
  char message_[kPngMessageSize] = {};
  png_alloc_size_t refused_ = 0;  // the size of an allocation refused (capped_png_malloc)
};

}  // namespace

ImageInfo probe_png(const uint8_t* bytes, size_t size, const std::string& name) {
  PngReader png(bytes, size, name);
  png.read_info();
  ImageInfo info;
  info.format = ImageFormat::Png;
  info.width = png.width();
  info.height = png.height();
  info.channels = png.stored_channels();
  return info;
}

double decode_png(const uint8_t* bytes, size_t size, const DecodeOptions& options, Image& out,
                  const std::string& name) {
  PngReader png(bytes, size, name);
  png.read_info();
  check_image_size(png.width(), png.height(), options.max_pixels, name);
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

}  // namespace stoker::data::detail
