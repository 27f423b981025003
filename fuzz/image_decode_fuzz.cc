// Image files of image_folder data sets (worker/runtime/data/images/image.h): the header read,
// the whole decode, a region of it, and the training and evaluation transforms. A refused file
// is the expected answer; an accepted one must decode to the size its header gave, and its
// region to the same pixels as the whole image's.
#include <cstdlib>
#include <random>

#include "fuzz/fuzz_target.h"
#include "worker/runtime/data/images/image.h"

namespace images = deepool::worker::images;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view file = deepool::fuzz::AsText(data, size);
  auto image_size = images::ReadImageSize(file);
  if (!image_size.ok()) return 0;
  // Large images are valid but slow to fuzz: the header is what matters for them.
  if (int64_t{image_size->height} * image_size->width > 1 << 20) return 0;
  auto whole = images::DecodeImage(file);
  if (!whole.ok()) return 0;
  if (whole->height != image_size->height || whole->width != image_size->width ||
      whole->pixels.size() != size_t{3} * whole->height * whole->width) {
    std::abort();
  }
  std::mt19937_64 random(size);
  const images::Rect region = images::RandomResizedCropRect(*image_size, random);
  auto part = images::DecodeImage(file, region);
  if (!part.ok()) std::abort();  // the whole image decoded, so any region of it must
  for (int y = 0; y < region.height; ++y) {
    for (int x = 0; x < region.width * 3; ++x) {
      const size_t in_part = (size_t{3} * y * region.width) + x;
      const size_t in_whole =
          (size_t{3} * (region.top + y) * whole->width) + (size_t{3} * region.left) + x;
      if (part->pixels[in_part] != whole->pixels[in_whole]) std::abort();
    }
  }
  if (!images::TrainImage(file, 32, random).ok()) std::abort();
  if (!images::EvalImage(file, 32).ok()) std::abort();
  return 0;
}
