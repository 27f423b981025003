#include "common/content_digest.h"

#include <catch2/catch.hpp>
#include <string>

namespace deepool {
namespace {

uint64_t DigestInPieces(const std::string& text, size_t piece) {
  ContentDigest digest;
  for (size_t i = 0; i < text.size(); i += piece) {
    digest.Update(text.data() + i, std::min(piece, text.size() - i));
  }
  return digest.Finish();
}

std::string Contents(size_t size) {
  std::string text(size, '\0');
  for (size_t i = 0; i < size; ++i) text[i] = static_cast<char>((i * 131 + 7) % 251);
  return text;
}

TEST_CASE("a content digest does not depend on how the contents are split", "[digest]") {
  for (size_t size : {0, 1, 31, 32, 33, 1000, 4099}) {
    const std::string text = Contents(size);
    const uint64_t whole = DigestInPieces(text, text.size() + 1);
    for (size_t piece : {1, 7, 32, 33, 512}) {
      INFO("size " << size << ", pieces of " << piece);
      CHECK(DigestInPieces(text, piece) == whole);
    }
  }
}

TEST_CASE("a content digest changes with any byte, the length, or the order of words", "[digest]") {
  const std::string text = Contents(4099);
  const uint64_t digest = DigestInPieces(text, 1000);
  for (size_t at : {0, 8, 31, 32, 2048, 4096, 4098}) {
    std::string changed = text;
    changed[at] = static_cast<char>(changed[at] ^ 1);
    INFO("byte " << at);
    CHECK(DigestInPieces(changed, 1000) != digest);
  }
  CHECK(DigestInPieces(text.substr(0, 4098), 1000) != digest);
  CHECK(DigestInPieces(text + std::string(1, '\0'), 1000) != digest);
  // Two 32-byte blocks swapped: each lane sees its words in another order.
  std::string swapped = text.substr(32, 32) + text.substr(0, 32) + text.substr(64);
  CHECK(DigestInPieces(swapped, 1000) != digest);
  // A file of zeros differs from an empty one and from a shorter file of zeros.
  CHECK(DigestInPieces(std::string(64, '\0'), 64) != DigestInPieces("", 1));
  CHECK(DigestInPieces(std::string(64, '\0'), 64) != DigestInPieces(std::string(32, '\0'), 32));
}

}  // namespace
}  // namespace deepool
