// Image files for the image data source's tests, written with libpng.
#pragma once

#include <png.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <random>
#include <vector>

namespace deepool::worker::testing {

// An RGB PNG of `height` x `width` interleaved pixels; creates the folders it needs.
inline void WritePng(const std::filesystem::path& path, int height, int width,
                     const std::vector<uint8_t>& pixels) {
  std::filesystem::create_directories(path.parent_path());
  REQUIRE(pixels.size() == static_cast<size_t>(3 * height * width));
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  image.format = PNG_FORMAT_RGB;
  REQUIRE(png_image_write_to_file(&image, path.c_str(), 0, pixels.data(), 0, nullptr) != 0);
}

// A PNG of one colour (id % 256, id / 256, 77): every crop, resize and flip of it keeps that
// colour, so a transformed row tells which image it came from.
inline void WriteSolidPng(const std::filesystem::path& path, int id, int height = 20,
                          int width = 30) {
  std::vector<uint8_t> pixels;
  for (int i = 0; i < height * width; ++i) {
    pixels.insert(pixels.end(),
                  {static_cast<uint8_t>(id % 256), static_cast<uint8_t>(id / 256), uint8_t{77}});
  }
  WritePng(path, height, width, pixels);
}

// root/class<c>/<n>.png: `per_class` noisy images per class whose mean colour depends on the
// class, so a small CNN learns to tell them apart.
inline void WriteLearnableFolder(const std::filesystem::path& root, int classes, int per_class,
                                 int side, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::uniform_int_distribution<int> noise(-60, 60);
  for (int c = 0; c < classes; ++c) {
    for (int n = 0; n < per_class; ++n) {
      std::vector<uint8_t> pixels;
      for (int i = 0; i < side * side; ++i) {
        for (int channel = 0; channel < 3; ++channel) {
          const int base = channel == c % 3 ? 190 : 70;
          pixels.push_back(static_cast<uint8_t>(std::clamp(base + noise(random), 0, 255)));
        }
      }
      WritePng(root / ("class" + std::to_string(c)) / (std::to_string(n) + ".png"), side, side,
               pixels);
    }
  }
}

}  // namespace deepool::worker::testing
