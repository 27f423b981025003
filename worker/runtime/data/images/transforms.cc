// torchvision's ImageNet transforms on decoded images: RandomResizedCrop's rectangle,
// CenterCrop's, the flip, and the two recipes (training and evaluation).
#include <algorithm>
#include <cfenv>
#include <cmath>

#include "worker/runtime/data/images/image.h"

namespace deepool::worker::images {
namespace {

// Python's round(): halves to even (the default floating-point rounding mode).
int RoundHalfEven(double value) { return static_cast<int>(std::nearbyint(value)); }

constexpr double kMinScale = 0.08;
constexpr double kMaxScale = 1.0;
constexpr double kMinRatio = 3.0 / 4.0;
constexpr double kMaxRatio = 4.0 / 3.0;
constexpr int kTries = 10;

}  // namespace

void FlipHorizontally(Image* image) {
  for (int y = 0; y < image->height; ++y) {
    uint8_t* row = &image->pixels[static_cast<size_t>(y) * image->width * 3];
    for (int left = 0, right = image->width - 1; left < right; ++left, --right) {
      std::swap_ranges(row + 3 * left, row + 3 * left + 3, row + 3 * right);
    }
  }
}

Rect RandomResizedCropRect(ImageSize size, std::mt19937_64& random) {
  const double area = static_cast<double>(size.height) * size.width;
  std::uniform_real_distribution<double> scale(kMinScale, kMaxScale);
  std::uniform_real_distribution<double> log_ratio(std::log(kMinRatio), std::log(kMaxRatio));
  for (int attempt = 0; attempt < kTries; ++attempt) {
    const double target_area = area * scale(random);
    const double ratio = std::exp(log_ratio(random));
    const int width = RoundHalfEven(std::sqrt(target_area * ratio));
    const int height = RoundHalfEven(std::sqrt(target_area / ratio));
    if (width > 0 && width <= size.width && height > 0 && height <= size.height) {
      const int top = std::uniform_int_distribution<int>(0, size.height - height)(random);
      const int left = std::uniform_int_distribution<int>(0, size.width - width)(random);
      return Rect{top, left, height, width};
    }
  }
  // Ten misses (a very long or tall image): the centre, at the nearest allowed ratio.
  const double ratio = static_cast<double>(size.width) / size.height;
  int width = size.width;
  int height = size.height;
  if (ratio < kMinRatio) {
    height = std::max(1, RoundHalfEven(width / kMinRatio));
  } else if (ratio > kMaxRatio) {
    width = std::max(1, RoundHalfEven(height * kMaxRatio));
  }
  height = std::min(height, size.height);
  width = std::min(width, size.width);
  return Rect{(size.height - height) / 2, (size.width - width) / 2, height, width};
}

Rect CenterCropRect(ImageSize size, int height, int width) {
  return Rect{RoundHalfEven((size.height - height) / 2.0),
              RoundHalfEven((size.width - width) / 2.0), height, width};
}

StatusOr<Image> TrainImage(std::string_view file, int side, std::mt19937_64& random) {
  ASSIGN_OR_RETURN(const ImageSize size, ReadImageSize(file));
  const Rect crop = RandomResizedCropRect(size, random);
  const bool flip = std::bernoulli_distribution(0.5)(random);
  return TrainImage(file, side, crop, flip);
}

StatusOr<Image> TrainImage(std::string_view file, int side, const Rect& crop, bool flip) {
  ASSIGN_OR_RETURN(const Image region, DecodeImage(file, crop));
  Image image = Resize(region, side, side);
  if (flip) FlipHorizontally(&image);
  return image;
}

StatusOr<Image> EvalImage(std::string_view file, int side) {
  ASSIGN_OR_RETURN(const Image whole, DecodeImage(file));
  const int resized = side * 256 / 224;
  // torchvision's Resize(int): the shorter side to `resized`, the longer one scaled, truncated.
  int height = resized;
  int width = resized;
  if (whole.width < whole.height) {
    height = static_cast<int>(static_cast<int64_t>(resized) * whole.height / whole.width);
  } else {
    width = static_cast<int>(static_cast<int64_t>(resized) * whole.width / whole.height);
  }
  const Image image = Resize(whole, height, width);
  const int crop_height = std::min(side, height);
  const int crop_width = std::min(side, width);
  const Rect crop = CenterCropRect({height, width}, crop_height, crop_width);
  Image out{side, side, std::vector<uint8_t>(static_cast<size_t>(side) * side * 3, 0)};
  // An image smaller than the crop is padded with zeros, as torchvision's CenterCrop pads it.
  const int pad_top = (side - crop_height) / 2;
  const int pad_left = (side - crop_width) / 2;
  for (int y = 0; y < crop_height; ++y) {
    std::copy_n(&image.pixels[(static_cast<size_t>(crop.top + y) * width + crop.left) * 3],
                static_cast<size_t>(crop_width) * 3,
                &out.pixels[(static_cast<size_t>(pad_top + y) * side + pad_left) * 3]);
  }
  return out;
}

}  // namespace deepool::worker::images
