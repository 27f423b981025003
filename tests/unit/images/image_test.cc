#include "worker/runtime/data/images/image.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <string_view>

#include "tests/source_dir.h"

namespace deepool::worker::images {
namespace {

// A seed file of the image fuzz target (fuzz/corpus/image_decode/).
std::string SeedFile(const std::string& name) {
  std::ifstream in(std::string(DEEPOOL_SOURCE_DIR) + "/fuzz/corpus/image_decode/" + name,
                   std::ios::binary);
  REQUIRE(in.good());
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// PNG's chunk checksum (CRC-32, ISO 3309), bit by bit: the tests checksum a few bytes.
uint32_t Crc32(const std::string& bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (char byte : bytes) {
    crc ^= static_cast<uint8_t>(byte);
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return crc ^ 0xFFFFFFFFu;
}

Image Solid(int height, int width, uint8_t value) {
  return Image{height, width, std::vector<uint8_t>(static_cast<size_t>(height) * width * 3, value)};
}

TEST_CASE("JPEG and PNG files give their size and decode to it", "[images]") {
  for (const auto& [name, height, width] : {std::tuple<const char*, int, int>{"rgb420.jpg", 16, 16},
                                            {"rgb444_odd.jpg", 7, 13},
                                            {"progressive.jpg", 17, 24},
                                            {"gray.jpg", 11, 9},
                                            {"cmyk.jpg", 8, 8},
                                            {"rgb.png", 9, 12},
                                            {"rgba.png", 5, 7},
                                            {"palette.png", 10, 10},
                                            {"gray16.png", 4, 5}}) {
    INFO(name);
    const std::string file = SeedFile(name);
    auto size = ReadImageSize(file);
    REQUIRE(size.ok());
    CHECK(size->height == height);
    CHECK(size->width == width);
    auto image = DecodeImage(file);
    INFO(image.status().ToString());
    REQUIRE(image.ok());
    CHECK(image->pixels.size() == static_cast<size_t>(3 * height * width));
  }
}

TEST_CASE("every prefix of an image file, and files that are none, are refused", "[images]") {
  for (const char* name : {"rgb420.jpg", "progressive.jpg", "rgb.png", "palette.png"}) {
    const std::string file = SeedFile(name);
    // A PNG without its 12-byte end chunk still holds every pixel, and decodes.
    const std::string_view name_view(name);
    const size_t end =
        name_view.substr(name_view.size() - 4) == ".png" ? file.size() - 12 : file.size();
    for (size_t length = 0; length < end; ++length) {
      INFO(name << " cut to " << length << " bytes");
      // The size may be known from a long enough prefix; the pixels never are.
      CHECK(DecodeImage(file.substr(0, length)).status().code() == StatusCode::kInvalidArgument);
    }
  }
  CHECK(DecodeImage("").status().message() == "not a JPEG or PNG image");
  CHECK(DecodeImage("GIF89a....").status().message() == "not a JPEG or PNG image");
  std::string garbage = SeedFile("rgb420.jpg");
  std::mt19937 random(3);
  for (size_t i = 200; i < garbage.size() - 2; ++i) garbage[i] = static_cast<char>(random());
  auto decoded = DecodeImage(garbage);  // refused or decoded, never a crash
  CHECK((decoded.ok() || decoded.status().code() == StatusCode::kInvalidArgument));
}

TEST_CASE("an image larger than the pixel limit is refused from its header", "[images]") {
  std::string file = SeedFile("rgb.png");
  // The IHDR chunk's width and height (big-endian, bytes 16-23): 100000 x 100000.
  for (int offset : {16, 20}) {
    file[offset] = 0;
    file[offset + 1] = 0x01;
    file[offset + 2] = static_cast<char>(0x86);
    file[offset + 3] = static_cast<char>(0xA0);
  }
  const uint32_t crc = Crc32(file.substr(12, 17));  // the chunk's type and data
  for (int i = 0; i < 4; ++i) file[29 + i] = static_cast<char>(crc >> (24 - 8 * i));
  auto size = ReadImageSize(file);
  REQUIRE_FALSE(size.ok());
  CHECK_THAT(size.status().message(), Catch::Contains("too large"));
}

TEST_CASE("a region is decoded only inside the image", "[images]") {
  const std::string file = SeedFile("rgb444_odd.jpg");  // 13 x 7
  auto whole = DecodeImage(file);
  REQUIRE(whole.ok());
  auto part = DecodeImage(file, Rect{2, 3, 4, 5});
  REQUIRE(part.ok());
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 15; ++x) {
      REQUIRE(part->pixels[static_cast<size_t>(y * 15 + x)] ==
              whole->pixels[static_cast<size_t>((2 + y) * 39 + 9 + x)]);
    }
  }
  CHECK(DecodeImage(file, Rect{0, 0, 8, 13}).status().code() == StatusCode::kInvalidArgument);
  CHECK(DecodeImage(file, Rect{-1, 0, 2, 2}).status().code() == StatusCode::kInvalidArgument);
  CHECK(DecodeImage(file, Rect{0, 0, 0, 2}).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("a region of a damaged progressive JPEG has the whole decode's pixels", "[images]") {
  // Corrupt scans (bad Huffman codes) leave coefficients unknown, so libjpeg smooths blocks
  // with their neighbours up to two blocks away; found by the image fuzz target.
  const std::string file = SeedFile("progressive_damaged.jpg");  // 233 x 17, 4:2:0
  auto whole = DecodeImage(file);
  REQUIRE(whole.ok());
  REQUIRE(whole->width == 233);
  REQUIRE(whole->height == 17);
  for (const Rect region : {Rect{0, 105, 17, 23}, Rect{3, 40, 10, 60}, Rect{9, 180, 8, 53}}) {
    CAPTURE(region.top, region.left, region.height, region.width);
    auto part = DecodeImage(file, region);
    REQUIRE(part.ok());
    for (int y = 0; y < region.height; ++y) {
      for (int x = 0; x < region.width * 3; ++x) {
        const size_t in_whole =
            static_cast<size_t>((region.top + y) * whole->width * 3 + region.left * 3 + x);
        REQUIRE(part->pixels[static_cast<size_t>(y * region.width * 3 + x)] ==
                whole->pixels[in_whole]);
      }
    }
  }
}

TEST_CASE("resizing keeps a constant image constant and same-size images unchanged", "[images]") {
  for (const auto& [height, width] : {std::pair<int, int>{224, 224}, {7, 300}, {1, 1}}) {
    const Image resized = Resize(Solid(37, 53, 200), height, width);
    REQUIRE(resized.pixels.size() == static_cast<size_t>(3 * height * width));
    CHECK(std::all_of(resized.pixels.begin(), resized.pixels.end(),
                      [](uint8_t v) { return v == 200; }));
  }
  Image ramp = Solid(2, 4, 0);
  for (size_t i = 0; i < ramp.pixels.size(); ++i) ramp.pixels[i] = static_cast<uint8_t>(i * 10);
  CHECK(Resize(ramp, 2, 4).pixels == ramp.pixels);
}

TEST_CASE("shrinking widens the triangle filter by the scale, as PIL does", "[images]") {
  // 4 -> 2 pixels: output 0 is centred at input 1.0 and reads inputs 0-2 with weights 0.75,
  // 0.75, 0.25 (normalised); output 1 reads inputs 1-3 with 0.25, 0.75, 0.75. PIL's
  // Image.resize((2, 1), BILINEAR) gives 71 and 207 for this row.
  const Image row{1, 4, {0, 0, 0, 100, 100, 100, 200, 200, 200, 250, 250, 250}};
  const Image half = Resize(row, 1, 2);
  CHECK(half.pixels == std::vector<uint8_t>{71, 71, 71, 207, 207, 207});
}

TEST_CASE("flipping twice gives the image back, flipping once mirrors each row", "[images]") {
  Image image{2, 3, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18}};
  Image flipped = image;
  FlipHorizontally(&flipped);
  CHECK(flipped.pixels ==
        std::vector<uint8_t>{7, 8, 9, 4, 5, 6, 1, 2, 3, 16, 17, 18, 13, 14, 15, 10, 11, 12});
  FlipHorizontally(&flipped);
  CHECK(flipped.pixels == image.pixels);
}

TEST_CASE("random resized crops lie inside the image, by the seed, in torchvision's ranges",
          "[images]") {
  std::mt19937_64 random(7);
  std::mt19937_64 again(7);
  const ImageSize size{375, 500};
  for (int i = 0; i < 1000; ++i) {
    const Rect rect = RandomResizedCropRect(size, random);
    REQUIRE(rect == RandomResizedCropRect(size, again));
    REQUIRE(rect.top >= 0);
    REQUIRE(rect.left >= 0);
    REQUIRE(rect.top + rect.height <= size.height);
    REQUIRE(rect.left + rect.width <= size.width);
    const double area = static_cast<double>(rect.height) * rect.width / (375.0 * 500.0);
    REQUIRE(area >= 0.07);  // 0.08, less the rounding of the sides
    const double ratio = static_cast<double>(rect.width) / rect.height;
    REQUIRE(ratio >= 0.70);
    REQUIRE(ratio <= 1.4);
  }
  // A strip no crop of ratio 3/4..4/3 fits into ten times: the centre at ratio 4/3.
  CHECK(RandomResizedCropRect({10, 10000}, random) == Rect{0, 4993, 10, 13});
  CHECK(RandomResizedCropRect({10000, 10}, random) == Rect{4993, 0, 13, 10});
}

TEST_CASE("centre crops round their offsets half to even, as torchvision does", "[images]") {
  CHECK(CenterCropRect({256, 341}, 224, 224) == Rect{16, 58, 224, 224});  // 58.5 -> 58
  CHECK(CenterCropRect({257, 256}, 224, 224) == Rect{16, 16, 224, 224});  // 16.5 -> 16
  CHECK(CenterCropRect({259, 256}, 224, 224) == Rect{18, 16, 224, 224});  // 17.5 -> 18
}

TEST_CASE("the training and evaluation transforms give side x side images", "[images]") {
  const std::string file = SeedFile("progressive.jpg");
  std::mt19937_64 random(1);
  auto train = TrainImage(file, 32, random);
  REQUIRE(train.ok());
  CHECK(train->height == 32);
  CHECK(train->width == 32);
  auto eval = EvalImage(file, 32);
  REQUIRE(eval.ok());
  CHECK(eval->pixels.size() == 32 * 32 * 3);
  std::vector<uint8_t> planes(32 * 32 * 3);
  ToChannelsFirst(*eval, planes.data());
  CHECK(planes[1] == eval->pixels[3]);         // red of pixel 1
  CHECK(planes[1024 + 1] == eval->pixels[4]);  // green of pixel 1
  CHECK(planes[2048 + 1] == eval->pixels[5]);  // blue of pixel 1
}

}  // namespace
}  // namespace deepool::worker::images
