// JPEG and PNG encoding into memory, and downscaling (encode.h). libjpeg and libpng report errors by
// longjmp: each call sits in a function that arms setjmp first and holds no C++ object with a
// destructor across the library's frames.
#include "data/encode.h"

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdio>  // jpeglib.h uses FILE without including stdio.h
#include <cstdlib>
#include <cstring>

#include <jpeglib.h>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <png.h>

#include "common/error.h"

namespace stoker::data {
namespace {

struct JpegError {
  jpeg_error_mgr pub;  // first member: libjpeg sees only this part
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX] = {};
};

[[noreturn]] void on_jpeg_error(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Compresses into a malloc'd buffer; false (with err->message) when libjpeg failed.
bool compress_jpeg(const Image& image, int quality, JpegError* err, unsigned char** out, unsigned long* size) {
  jpeg_compress_struct cinfo;
  cinfo.err = jpeg_std_error(&err->pub);
  err->pub.error_exit = on_jpeg_error;
  if (setjmp(err->jump)) {
    jpeg_destroy_compress(&cinfo);
    return false;
  }
  jpeg_create_compress(&cinfo);
  jpeg_mem_dest(&cinfo, out, size);
  cinfo.image_width = static_cast<JDIMENSION>(image.width);
  cinfo.image_height = static_cast<JDIMENSION>(image.height);
  cinfo.input_components = static_cast<int>(image.channels);
  cinfo.in_color_space = image.channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  const size_t row = static_cast<size_t>(image.width * image.channels);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW line = const_cast<JSAMPROW>(image.pixels.data() + cinfo.next_scanline * row);
    jpeg_write_scanlines(&cinfo, &line, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  return true;
}

void check_image(const Image& image, const std::string& name) {
  STOKER_CHECK(image.height > 0 && image.width > 0 && (image.channels == 1 || image.channels == 3) &&
                   image.pixels.size() == static_cast<size_t>(image.height * image.width * image.channels),
               "{}: cannot encode a {}x{}x{} image of {} bytes", name, image.height, image.width, image.channels,
               image.pixels.size());
}

void append_png(png_structp png, png_bytep data, png_size_t length) {
  auto* out = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + length);
}

bool compress_png(const Image& image, std::vector<uint8_t>* out) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  if (png == nullptr) return false;
  png_infop info = png_create_info_struct(png);
  if (info == nullptr || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return false;
  }
  png_set_write_fn(png, out, append_png, nullptr);
  png_set_IHDR(png, info, static_cast<png_uint_32>(image.width), static_cast<png_uint_32>(image.height), 8,
               image.channels == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  const size_t row = static_cast<size_t>(image.width * image.channels);
  for (int64_t y = 0; y < image.height; ++y) png_write_row(png, const_cast<png_bytep>(image.pixels.data() + y * row));
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return true;
}

}  // namespace

std::vector<uint8_t> encode_jpeg(const Image& image, int quality, const std::string& name) {
  check_image(image, name);
  STOKER_CHECK(quality >= 1 && quality <= 100, "JPEG quality must be 1..100, not {}", quality);
  JpegError err;
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  const bool ok = compress_jpeg(image, quality, &err, &buffer, &size);
  std::vector<uint8_t> out;
  if (ok) out.assign(buffer, buffer + size);
  std::free(buffer);
  STOKER_CHECK(ok, "{}: JPEG encoding failed: {}", name, err.message);
  return out;
}

std::vector<uint8_t> encode_png(const Image& image, const std::string& name) {
  check_image(image, name);
  std::vector<uint8_t> out;
  STOKER_CHECK(compress_png(image, &out), "{}: PNG encoding failed", name);
  return out;
}

Image fit_within(const Image& image, int64_t max_side) {
  const int64_t longer = std::max(image.height, image.width);
  if (max_side <= 0 || longer <= max_side) return image;
  const double scale = static_cast<double>(max_side) / static_cast<double>(longer);
  Image out;
  out.channels = image.channels;
  out.height = std::max<int64_t>(1, static_cast<int64_t>(std::lround(image.height * scale)));
  out.width = std::max<int64_t>(1, static_cast<int64_t>(std::lround(image.width * scale)));
  out.pixels.resize(static_cast<size_t>(out.height * out.width * out.channels));
  const int type = image.channels == 1 ? CV_8UC1 : CV_8UC3;
  const cv::Mat src(static_cast<int>(image.height), static_cast<int>(image.width), type,
                    const_cast<uint8_t*>(image.pixels.data()));
  cv::Mat dst(static_cast<int>(out.height), static_cast<int>(out.width), type, out.pixels.data());
  cv::resize(src, dst, dst.size(), 0, 0, cv::INTER_AREA);
  return out;
}

}  // namespace stoker::data
