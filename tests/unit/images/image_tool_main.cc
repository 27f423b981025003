// deepool-image-tool: the image library on one file, for tests/python/image_transforms_test.py,
// which compares its output with torchvision's.
//   deepool-image-tool size FILE                          -> "HEIGHT WIDTH"
//   deepool-image-tool decode FILE [TOP LEFT HEIGHT WIDTH] -> raw RGB bytes, rows top to bottom
//   deepool-image-tool train FILE SIDE TOP LEFT HEIGHT WIDTH FLIP(0|1) -> raw RGB bytes
//   deepool-image-tool eval FILE SIDE                      -> raw RGB bytes
// Errors go to stderr with exit code 1; a wrong command line exits 2.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "worker/runtime/data/images/image.h"

namespace images = deepool::worker::images;

namespace {

int Fail(const deepool::Status& status) {
  std::cerr << status.ToString() << "\n";
  return 1;
}

int Write(const deepool::StatusOr<images::Image>& image) {
  if (!image.ok()) return Fail(image.status());
  std::fwrite(image->pixels.data(), 1, image->pixels.size(), stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() < 2) {
    std::cerr << "usage: deepool-image-tool size|decode|train|eval FILE [...]\n";
    return 2;
  }
  std::ifstream in(args[1], std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto number = [&](size_t i) { return std::atoi(args.at(i).c_str()); };
  const std::string& command = args[0];
  if (command == "size" && args.size() == 2) {
    auto size = images::ReadImageSize(file);
    if (!size.ok()) return Fail(size.status());
    std::cout << size->height << " " << size->width << "\n";
    return 0;
  }
  if (command == "decode" && args.size() == 2) return Write(images::DecodeImage(file));
  if (command == "decode" && args.size() == 6) {
    return Write(images::DecodeImage(file, {number(2), number(3), number(4), number(5)}));
  }
  if (command == "train" && args.size() == 8) {
    return Write(images::TrainImage(file, number(2), {number(3), number(4), number(5), number(6)},
                                    number(7) != 0));
  }
  if (command == "eval" && args.size() == 3) return Write(images::EvalImage(file, number(2)));
  std::cerr << "deepool-image-tool: bad arguments for " << command << "\n";
  return 2;
}
