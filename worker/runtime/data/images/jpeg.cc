// JPEG decoding with libjpeg-turbo, as PIL decodes (islow IDCT, fancy upsampling).
//
// libjpeg reports errors by calling error_exit, which must not return: it longjmps back into
// the one function below that calls libjpeg. That function holds no object with a destructor
// (buffers belong to its caller), so the jump skips nothing that needs cleaning up.
// jpeglib.h needs size_t and FILE declared before it.
#include <cstddef>
#include <cstdio>
// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include <algorithm>
#include <csetjmp>
#include <string>
#include <vector>

#include "worker/runtime/data/images/codecs.h"

namespace deepool::worker::images::internal {
namespace {

struct ErrorManager {
  jpeg_error_mgr manager;  // first: libjpeg sees only this part
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void ExitWithMessage(j_common_ptr info) {
  auto* errors = reinterpret_cast<ErrorManager*>(info->err);
  (*info->err->format_message)(info, errors->message);
  std::longjmp(errors->jump, 1);
}

// Warnings are ignored as PIL ignores them (extraneous bytes before a marker are common in
// photo collections), except a premature end of data: a truncated file is corrupt, not an image
// with grey rows at the bottom.
void OnMessage(j_common_ptr info, int level) {
  if (level < 0 && info->err->msg_code == JWRN_JPEG_EOF) ExitWithMessage(info);
}

// What the caller asks of Run and gets back; the buffers are the caller's.
struct Request {
  const uint8_t* data = nullptr;
  size_t size = 0;
  bool header_only = false;
  Rect region;
  // Out:
  int height = 0;
  int width = 0;
  std::vector<uint8_t>* pixels = nullptr;    // region.height * region.width * 3
  std::vector<uint8_t>* scanline = nullptr;  // one decoded row
};

// PIL's conversion of CMYK to RGB; Adobe's files store the channels inverted.
void CmykToRgb(const uint8_t* cmyk, int count, bool inverted, uint8_t* rgb) {
  auto mul_div_255 = [](int a, int b) {
    const int t = a * b + 128;
    return ((t >> 8) + t) >> 8;
  };
  for (int i = 0; i < count; ++i) {
    const uint8_t* in = cmyk + 4 * i;
    const int k = inverted ? 255 - in[3] : in[3];
    const int nk = 255 - k;
    for (int c = 0; c < 3; ++c) {
      const int ink = inverted ? 255 - in[c] : in[c];
      rgb[3 * i + c] = static_cast<uint8_t>(nk - mul_div_255(ink, nk));
    }
  }
}

// Rows and columns decoded beyond the region on each side, where the image has them: the
// upsampling of subsampled chroma reads neighbouring samples, and a decode that starts at the
// region's edge would treat that edge as the image's.
constexpr int kMargin = 16;

// Returns false with `message` set when libjpeg fails.
bool Run(Request& request, ErrorManager& errors) {
  jpeg_decompress_struct info;
  info.err = jpeg_std_error(&errors.manager);
  errors.manager.error_exit = ExitWithMessage;
  errors.manager.emit_message = OnMessage;
  if (setjmp(errors.jump) != 0) {
    jpeg_destroy_decompress(&info);
    return false;
  }
  jpeg_create_decompress(&info);
  jpeg_mem_src(&info, request.data, static_cast<unsigned long>(request.size));
  jpeg_read_header(&info, TRUE);
  request.height = static_cast<int>(info.image_height);
  request.width = static_cast<int>(info.image_width);
  if (request.header_only || int64_t{request.height} * request.width > kMaxImagePixels ||
      request.height < 1 || request.width < 1) {
    jpeg_destroy_decompress(&info);
    return true;
  }
  const bool cmyk = info.jpeg_color_space == JCS_CMYK || info.jpeg_color_space == JCS_YCCK;
  info.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  info.dct_method = JDCT_ISLOW;
  jpeg_start_decompress(&info);
  const Rect& region = request.region;
  // A progressive file whose scans leave coefficients unknown (a damaged one) is decoded with
  // block smoothing, which reads blocks up to two away (32 pixels of a subsampled component),
  // beyond the margin: a crop or skip would change pixels inside the region. Progressive files
  // are decoded in whole rows from the top; their scans are all read before the first row
  // anyway.
  const int margin = info.progressive_mode ? std::max(request.width, request.height) : kMargin;
  JDIMENSION first_column = static_cast<JDIMENSION>(std::max(0, region.left - margin));
  JDIMENSION columns =
      static_cast<JDIMENSION>(std::min(request.width, region.left + region.width + margin) -
                              static_cast<int>(first_column));
  if (columns < info.output_width) jpeg_crop_scanline(&info, &first_column, &columns);
  const int first_row = std::max(0, region.top - margin);
  if (first_row > 0) jpeg_skip_scanlines(&info, static_cast<JDIMENSION>(first_row));
  request.scanline->resize(static_cast<size_t>(info.output_width) * info.output_components);
  request.pixels->resize(static_cast<size_t>(region.height) * region.width * 3);
  const int skip_columns = region.left - static_cast<int>(first_column);
  while (static_cast<int>(info.output_scanline) < region.top + region.height) {
    const int row = static_cast<int>(info.output_scanline);
    JSAMPROW line = request.scanline->data();
    jpeg_read_scanlines(&info, &line, 1);
    if (row < region.top) continue;
    uint8_t* out =
        request.pixels->data() + static_cast<size_t>(row - region.top) * region.width * 3;
    if (cmyk) {
      CmykToRgb(line + 4 * skip_columns, region.width, info.saw_Adobe_marker != 0, out);
    } else {
      std::copy_n(line + 3 * skip_columns, 3 * region.width, out);
    }
  }
  jpeg_abort_decompress(&info);
  jpeg_destroy_decompress(&info);
  return true;
}

// The header's size, and with `pixels` the region's pixels.
Status Decode(std::string_view file, const Rect& region, ImageSize* size,
              std::vector<uint8_t>* pixels) {
  std::vector<uint8_t> scanline;
  Request request;
  request.data = reinterpret_cast<const uint8_t*>(file.data());
  request.size = file.size();
  request.header_only = pixels == nullptr;
  request.region = region;
  request.pixels = pixels;
  request.scanline = &scanline;
  ErrorManager errors;
  if (!Run(request, errors)) {
    return InvalidArgumentError(std::string("corrupt JPEG data: ") + errors.message);
  }
  *size = ImageSize{request.height, request.width};
  return Status::Ok();
}

}  // namespace

bool IsJpeg(std::string_view file) {
  return file.size() >= 3 && static_cast<uint8_t>(file[0]) == 0xFF &&
         static_cast<uint8_t>(file[1]) == 0xD8 && static_cast<uint8_t>(file[2]) == 0xFF;
}

StatusOr<ImageSize> JpegSize(std::string_view file) {
  ImageSize size;
  RETURN_IF_ERROR(Decode(file, Rect{}, &size, nullptr));
  return size;
}

StatusOr<Image> DecodeJpeg(std::string_view file, const Rect& region) {
  Image image;
  ImageSize size;
  RETURN_IF_ERROR(Decode(file, region, &size, &image.pixels));
  image.height = region.height;
  image.width = region.width;
  return image;
}

}  // namespace deepool::worker::images::internal
