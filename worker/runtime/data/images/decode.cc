// ReadImageSize and DecodeImage: the file's signature picks the decoder; sizes are checked
// before any pixel is decoded.
#include <string>

#include "worker/runtime/data/images/codecs.h"
#include "worker/runtime/data/images/image.h"

namespace deepool::worker::images {
namespace {

Status CheckSize(const ImageSize& size) {
  if (size.height < 1 || size.width < 1) return InvalidArgumentError("the image is empty");
  if (int64_t{size.height} * size.width > kMaxImagePixels) {
    return InvalidArgumentError("the image is too large (" + std::to_string(size.width) + "x" +
                                std::to_string(size.height) + " pixels, at most " +
                                std::to_string(kMaxImagePixels) + ")");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<ImageSize> ReadImageSize(std::string_view file) {
  StatusOr<ImageSize> size = InvalidArgumentError("not a JPEG or PNG image");
  if (internal::IsJpeg(file)) {
    size = internal::JpegSize(file);
  } else if (internal::IsPng(file)) {
    size = internal::PngSize(file);
  }
  if (size.ok()) RETURN_IF_ERROR(CheckSize(*size));
  return size;
}

StatusOr<Image> DecodeImage(std::string_view file) {
  ASSIGN_OR_RETURN(const ImageSize size, ReadImageSize(file));
  return DecodeImage(file, Rect{0, 0, size.height, size.width});
}

StatusOr<Image> DecodeImage(std::string_view file, const Rect& region) {
  ASSIGN_OR_RETURN(const ImageSize size, ReadImageSize(file));
  if (region.top < 0 || region.left < 0 || region.height < 1 || region.width < 1 ||
      region.height > size.height - region.top || region.width > size.width - region.left) {
    return InvalidArgumentError("the region is not inside the " + std::to_string(size.width) + "x" +
                                std::to_string(size.height) + " image");
  }
  return internal::IsJpeg(file) ? internal::DecodeJpeg(file, region)
                                : internal::DecodePng(file, region);
}

void ToChannelsFirst(const Image& image, uint8_t* out) {
  const size_t plane = static_cast<size_t>(image.height) * image.width;
  const uint8_t* in = image.pixels.data();
  for (size_t i = 0; i < plane; ++i) {
    out[i] = in[3 * i];
    out[plane + i] = in[3 * i + 1];
    out[2 * plane + i] = in[3 * i + 2];
  }
}

}  // namespace deepool::worker::images
