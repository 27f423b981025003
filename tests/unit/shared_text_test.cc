#include "common/shared_text.h"

#include <catch2/catch.hpp>
#include <string>
#include <string_view>

namespace deepool {
namespace {

size_t Length(std::string_view text) { return text.size(); }
size_t Bytes(const std::string& text) { return text.size(); }

TEST_CASE("copies of a SharedText share its buffer and read as a string", "[shared_text]") {
  const SharedText graph(std::string(1 << 20, 'g'));
  const SharedText copy = graph;  // NOLINT(performance-unnecessary-copy-initialization)
  CHECK(copy.SharesBufferWith(graph));
  CHECK(copy.str().data() == graph.str().data());  // no byte was copied
  CHECK(copy == graph);
  CHECK(Length(copy) == (1u << 20));
  CHECK(Bytes(copy) == (1u << 20));

  SharedText other = "{}";
  CHECK(other != graph);
  CHECK_FALSE(other.SharesBufferWith(graph));
  other = graph.str();  // a string assigned is a new buffer with the same text
  CHECK(other == graph);
  CHECK_FALSE(other.SharesBufferWith(graph));
}

TEST_CASE("an empty SharedText reads as the empty string", "[shared_text]") {
  const SharedText none;
  CHECK(none.empty());
  CHECK(none.size() == 0);
  CHECK(none.str().empty());
  CHECK(none == SharedText(""));
  CHECK(SharedText(std::string()).empty());
}

}  // namespace
}  // namespace deepool
