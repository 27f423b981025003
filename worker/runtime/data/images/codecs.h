// The two decoders behind image.h's DecodeImage and ReadImageSize: libjpeg-turbo and libpng.
// Each returns INVALID_ARGUMENT with the library's own words for a file it cannot decode; a
// region must lie inside the image (decode.cc checks).
// Threading: pure functions.
#pragma once

#include <string_view>

#include "common/status.h"
#include "worker/runtime/data/images/image.h"

namespace deepool::worker::images::internal {

bool IsJpeg(std::string_view file);
bool IsPng(std::string_view file);

StatusOr<ImageSize> JpegSize(std::string_view file);
StatusOr<Image> DecodeJpeg(std::string_view file, const Rect& region);

StatusOr<ImageSize> PngSize(std::string_view file);
StatusOr<Image> DecodePng(std::string_view file, const Rect& region);

}  // namespace deepool::worker::images::internal
