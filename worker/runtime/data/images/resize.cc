// PIL's bilinear resize (Image.resize with BILINEAR): for each output pixel, a triangle filter
// over the input pixels around its centre, widened by the scale factor when shrinking (so it
// antialiases), weights normalised and rounded to 22 fractional bits; one pass along the width,
// then one along the height, each rounding to 8 bits.
#include <algorithm>
#include <cmath>
#include <vector>

#include "worker/runtime/data/images/image.h"

namespace deepool::worker::images {
namespace {

constexpr int kPrecisionBits = 22;

// The inputs [first, first + count) and their fixed-point weights that make each output.
struct Taps {
  std::vector<int> first;
  std::vector<int> count;
  std::vector<int32_t> weights;  // `width` per output
  int width = 0;
};

Taps ComputeTaps(int in_size, int out_size) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double filter_scale = std::max(scale, 1.0);
  const double support = filter_scale;  // the triangle's support is 1 input pixel
  Taps taps;
  taps.width = static_cast<int>(std::ceil(support)) * 2 + 1;
  taps.first.resize(static_cast<size_t>(out_size));
  taps.count.resize(static_cast<size_t>(out_size));
  taps.weights.assign(static_cast<size_t>(out_size) * taps.width, 0);
  std::vector<double> weights(static_cast<size_t>(taps.width));
  for (int out = 0; out < out_size; ++out) {
    const double centre = (out + 0.5) * scale;
    const int first = std::max(static_cast<int>(centre - support + 0.5), 0);
    const int last = std::min(static_cast<int>(centre + support + 0.5), in_size);
    const int count = std::min(last - first, taps.width);
    double total = 0;
    for (int k = 0; k < count; ++k) {
      const double x = std::abs((k + first - centre + 0.5) / filter_scale);
      weights[static_cast<size_t>(k)] = x < 1 ? 1 - x : 0;
      total += weights[static_cast<size_t>(k)];
    }
    int32_t* fixed = &taps.weights[static_cast<size_t>(out) * taps.width];
    for (int k = 0; k < count; ++k) {
      const double w = total != 0 ? weights[static_cast<size_t>(k)] / total : 0;
      fixed[k] = static_cast<int32_t>(std::lround(w * (1 << kPrecisionBits)));
    }
    taps.first[static_cast<size_t>(out)] = first;
    taps.count[static_cast<size_t>(out)] = count;
  }
  return taps;
}

uint8_t Clip(int32_t sum) {
  const int32_t value = sum >> kPrecisionBits;
  return static_cast<uint8_t>(std::clamp(value, 0, 255));
}

// Rows [first_row, first_row + rows) of `in`, each resized along the width.
Image ResizeWidth(const Image& in, int first_row, int rows, int width) {
  const Taps taps = ComputeTaps(in.width, width);
  Image out{rows, width, std::vector<uint8_t>(static_cast<size_t>(rows) * width * 3)};
  for (int y = 0; y < rows; ++y) {
    const uint8_t* row = &in.pixels[static_cast<size_t>(first_row + y) * in.width * 3];
    uint8_t* to = &out.pixels[static_cast<size_t>(y) * width * 3];
    for (int x = 0; x < width; ++x) {
      const int32_t* w = &taps.weights[static_cast<size_t>(x) * taps.width];
      const uint8_t* from = row + static_cast<size_t>(taps.first[static_cast<size_t>(x)]) * 3;
      int32_t r = 1 << (kPrecisionBits - 1), g = r, b = r;
      for (int k = 0; k < taps.count[static_cast<size_t>(x)]; ++k) {
        r += from[3 * k] * w[k];
        g += from[3 * k + 1] * w[k];
        b += from[3 * k + 2] * w[k];
      }
      to[3 * x] = Clip(r);
      to[3 * x + 1] = Clip(g);
      to[3 * x + 2] = Clip(b);
    }
  }
  return out;
}

// `in` resized along the height, its row r standing for source row r + row_offset.
Image ResizeHeight(const Image& in, const Taps& taps, int row_offset, int height) {
  const size_t stride = static_cast<size_t>(in.width) * 3;
  Image out{height, in.width, std::vector<uint8_t>(static_cast<size_t>(height) * stride)};
  // Row by row, so the inner loop runs along contiguous bytes (and vectorises).
  std::vector<int32_t> sums(stride);
  for (int y = 0; y < height; ++y) {
    const int32_t* w = &taps.weights[static_cast<size_t>(y) * taps.width];
    const uint8_t* from =
        &in.pixels[static_cast<size_t>(taps.first[static_cast<size_t>(y)] - row_offset) * stride];
    std::fill(sums.begin(), sums.end(), int32_t{1} << (kPrecisionBits - 1));
    for (int k = 0; k < taps.count[static_cast<size_t>(y)]; ++k) {
      const uint8_t* row = from + static_cast<size_t>(k) * stride;
      const int32_t weight = w[k];
      for (size_t i = 0; i < stride; ++i) sums[i] += row[i] * weight;
    }
    uint8_t* to = &out.pixels[static_cast<size_t>(y) * stride];
    for (size_t i = 0; i < stride; ++i) to[i] = Clip(sums[i]);
  }
  return out;
}

}  // namespace

Image Resize(const Image& image, int height, int width) {
  const bool along_width = width != image.width;
  const bool along_height = height != image.height;
  if (!along_width && !along_height) return image;
  if (!along_height) return ResizeWidth(image, 0, image.height, width);
  const Taps taps = ComputeTaps(image.height, height);
  // Only the rows the vertical pass reads go through the horizontal one.
  const int first_row = taps.first.front();
  const int last_row = taps.first.back() + taps.count.back();
  if (!along_width) return ResizeHeight(image, taps, 0, height);
  return ResizeHeight(ResizeWidth(image, first_row, last_row - first_row, width), taps, first_row,
                      height);
}

}  // namespace deepool::worker::images
