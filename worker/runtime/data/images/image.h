// Decoding JPEG and PNG files and the image transforms of torchvision's ImageNet recipe, in plain
// C++ over libjpeg-turbo and libpng (no libtorch, so the fuzz target and benchmarks link it alone).
//
// Every function is defined on every input: a file that is truncated, corrupt, not an image or
// too large comes back as an INVALID_ARGUMENT status saying what is wrong (the caller adds the
// file's name), never as a crash, an exception or a longjmp out of this library.
//
// Equivalence with torchvision (the PIL backend its ImageFolder loader uses), tested in
// tests/python/image_transforms_test.py:
//   DecodeImage           == PIL.Image.open(f).convert("RGB") pixel for pixel (JPEG: the same
//                            islow IDCT and fancy upsampling; PNG: 16-bit channels keep their
//                            high byte, alpha is dropped, as convert("RGB") does);
//   Resize                == PIL's Image.resize(size, BILINEAR), within 1 level per pixel;
//   RandomResizedCropRect == transforms.RandomResizedCrop.get_params's rule for the rectangle
//                            (scale (0.08, 1), ratio (3/4, 4/3), ten tries, then the centre),
//                            drawn from our generator instead of torch's;
//   TrainImage            == RandomResizedCrop(size) + RandomHorizontalFlip on the same crop and
//                            flip, before ToTensor/Normalize (which the device does);
//   EvalImage             == Resize(size * 256 / 224) + CenterCrop(size).
// Threading: pure functions; any number of threads may call them at once.
#pragma once

#include <cstdint>
#include <random>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace deepool::worker::images {

// A file's bytes are passed as a std::string_view over them.

// An RGB image, rows top to bottom, pixels interleaved (height x width x 3 bytes).
struct Image {
  int height = 0;
  int width = 0;
  std::vector<uint8_t> pixels;
};

struct ImageSize {
  int height = 0;
  int width = 0;
};

// A rectangle of an image: rows [top, top + height), columns [left, left + width).
struct Rect {
  int top = 0;
  int left = 0;
  int height = 0;
  int width = 0;
  bool operator==(const Rect& o) const {
    return top == o.top && left == o.left && height == o.height && width == o.width;
  }
};

// Larger images are refused before any pixel is decoded (PIL's decompression-bomb limit is 89
// million pixels; ImageNet's largest is about 10 million).
inline constexpr int64_t kMaxImagePixels = int64_t{1} << 26;

// The image's size from its header (JPEG or PNG, told apart by their signatures).
StatusOr<ImageSize> ReadImageSize(std::string_view file);

// The whole image, or only `region` of it (which must lie inside the image). A JPEG region is
// decoded with libjpeg-turbo's scanline crop and skip, so a small crop of a large photo costs
// little more than its own pixels; the result equals the same rectangle of the whole decode.
StatusOr<Image> DecodeImage(std::string_view file);
StatusOr<Image> DecodeImage(std::string_view file, const Rect& region);

// PIL's bilinear resize (a triangle filter widened by the scale factor when shrinking, so it
// antialiases; a horizontal pass, then a vertical one, 8-bit intermediate).
Image Resize(const Image& image, int height, int width);

void FlipHorizontally(Image* image);

// torchvision's RandomResizedCrop rectangle for an image of `size` with the default scale and
// ratio ranges. Uses `random` for every draw (its sequence, not torch's).
Rect RandomResizedCropRect(ImageSize size, std::mt19937_64& random);

// The rectangle CenterCrop(height, width) keeps (torchvision rounds the offsets half to even);
// `size` must be at least as large.
Rect CenterCropRect(ImageSize size, int height, int width);

// The training transform at `side` x `side`: the crop rectangle drawn as RandomResizedCropRect
// does, then a flip with probability 1/2 (drawn after the rectangle).
StatusOr<Image> TrainImage(std::string_view file, int side, std::mt19937_64& random);
// The same for a given rectangle and flip (what the tests compare with torchvision's).
StatusOr<Image> TrainImage(std::string_view file, int side, const Rect& crop, bool flip);

// The evaluation transform: the shorter side resized to side * 256 / 224 (torchvision's Resize
// with one size: the longer side scaled to keep the aspect ratio, truncated), then the centre
// side x side.
StatusOr<Image> EvalImage(std::string_view file, int side);

// Channel-major copy into `out`, which holds 3 * height * width bytes (a [3, H, W] uint8 tensor).
void ToChannelsFirst(const Image& image, uint8_t* out);

}  // namespace deepool::worker::images
