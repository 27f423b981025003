// PNG decoding with libpng, to the RGB that PIL's convert("RGB") gives: palettes expanded,
// grey replicated, alpha and tRNS transparency dropped (not composited), 16-bit channels cut to
// their high byte.
//
// libpng reports errors by longjmp to png_jmpbuf; the one function below that calls libpng holds
// no object with a destructor (buffers belong to its caller).
#include <png.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "worker/runtime/data/images/codecs.h"

namespace deepool::worker::images::internal {
namespace {

constexpr uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};

struct Reader {
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t offset = 0;
  char message[256] = {};
};

void ReadBytes(png_structp png, png_bytep out, png_size_t count) {
  auto* reader = static_cast<Reader*>(png_get_io_ptr(png));
  if (count > reader->size - reader->offset) png_error(png, "unexpected end of file");
  std::memcpy(out, reader->data + reader->offset, count);
  reader->offset += count;
}

[[noreturn]] void OnError(png_structp png, png_const_charp message) {
  auto* reader = static_cast<Reader*>(png_get_error_ptr(png));
  std::snprintf(reader->message, sizeof reader->message, "%s", message);
  png_longjmp(png, 1);
}

void OnWarning(png_structp, png_const_charp) {}

struct Request {
  bool header_only = false;
  int height = 0;
  int width = 0;
  std::vector<uint8_t>* pixels = nullptr;  // the whole image, height * width * 3
  std::vector<png_bytep>* rows = nullptr;
};

bool Run(Reader& reader, Request& request) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &reader, OnError, OnWarning);
  if (png == nullptr) {
    std::snprintf(reader.message, sizeof reader.message, "out of memory");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (info == nullptr || setjmp(png_jmpbuf(png)) != 0) {
    png_destroy_read_struct(&png, &info, nullptr);
    if (reader.message[0] == '\0') std::snprintf(reader.message, sizeof reader.message, "error");
    return false;
  }
  png_set_read_fn(png, &reader, ReadBytes);
  png_read_info(png, info);
  request.width = static_cast<int>(png_get_image_width(png, info));
  request.height = static_cast<int>(png_get_image_height(png, info));
  if (request.header_only || request.height < 1 || request.width < 1 ||
      int64_t{request.height} * request.width > kMaxImagePixels) {
    png_destroy_read_struct(&png, &info, nullptr);
    return true;
  }
  const int color = png_get_color_type(png, info);
  if (png_get_bit_depth(png, info) == 16) png_set_strip_16(png);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) {
    png_set_expand_gray_1_2_4_to_8(png);
    png_set_gray_to_rgb(png);
  }
  // A palette's tRNS chunk becomes an alpha channel on expansion; drop it with the others.
  if ((color & PNG_COLOR_MASK_ALPHA) != 0 || png_get_valid(png, info, PNG_INFO_tRNS) != 0) {
    png_set_strip_alpha(png);
  }
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != static_cast<size_t>(request.width) * 3) {
    png_error(png, "unsupported pixel layout");
  }
  request.pixels->resize(static_cast<size_t>(request.height) * request.width * 3);
  request.rows->resize(static_cast<size_t>(request.height));
  for (int y = 0; y < request.height; ++y) {
    (*request.rows)[static_cast<size_t>(y)] =
        request.pixels->data() + static_cast<size_t>(y) * request.width * 3;
  }
  png_read_image(png, request.rows->data());
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

Status Decode(std::string_view file, ImageSize* size, std::vector<uint8_t>* pixels) {
  Reader reader;
  reader.data = reinterpret_cast<const uint8_t*>(file.data());
  reader.size = file.size();
  std::vector<png_bytep> rows;
  Request request;
  request.header_only = pixels == nullptr;
  request.pixels = pixels;
  request.rows = &rows;
  if (!Run(reader, request)) {
    return InvalidArgumentError(std::string("corrupt PNG data: ") + reader.message);
  }
  *size = ImageSize{request.height, request.width};
  return Status::Ok();
}

}  // namespace

bool IsPng(std::string_view file) {
  return file.size() >= sizeof kSignature &&
         std::memcmp(file.data(), kSignature, sizeof kSignature) == 0;
}

StatusOr<ImageSize> PngSize(std::string_view file) {
  ImageSize size;
  RETURN_IF_ERROR(Decode(file, &size, nullptr));
  return size;
}

StatusOr<Image> DecodePng(std::string_view file, const Rect& region) {
  std::vector<uint8_t> whole;
  ImageSize size;
  RETURN_IF_ERROR(Decode(file, &size, &whole));
  if (region == Rect{0, 0, size.height, size.width})
    return Image{size.height, size.width, std::move(whole)};
  Image image{region.height, region.width, {}};
  image.pixels.resize(static_cast<size_t>(region.height) * region.width * 3);
  for (int y = 0; y < region.height; ++y) {
    const uint8_t* from =
        whole.data() + (static_cast<size_t>(region.top + y) * size.width + region.left) * 3;
    std::copy_n(from, static_cast<size_t>(region.width) * 3,
                image.pixels.data() + static_cast<size_t>(y) * region.width * 3);
  }
  return image;
}

}  // namespace deepool::worker::images::internal
