// UTF-8 checks and repair of text from outside (common/utf8.h).
#include "common/utf8.h"

#include <catch2/catch.hpp>
#include <string>

namespace deepool {
namespace {

TEST_CASE("well-formed UTF-8 is told from bytes that are not", "[utf8]") {
  CHECK(IsValidUtf8(""));
  CHECK(IsValidUtf8("plain ascii"));
  CHECK(IsValidUtf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"));  // é, €, an emoji
  CHECK_FALSE(IsValidUtf8("\xFF"));
  CHECK_FALSE(IsValidUtf8("\x80"));              // a continuation byte first
  CHECK_FALSE(IsValidUtf8("\xC0\xAF"));          // overlong '/'
  CHECK_FALSE(IsValidUtf8("\xED\xA0\x80"));      // a UTF-16 surrogate
  CHECK_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // past U+10FFFF
  CHECK_FALSE(IsValidUtf8("cut \xE2\x82"));      // truncated
}

TEST_CASE("text that is not UTF-8 is repaired byte by byte, valid text kept", "[utf8]") {
  const std::string replacement = "\xEF\xBF\xBD";
  CHECK(ToValidUtf8("") == "");
  CHECK(ToValidUtf8("caf\xC3\xA9 \xF0\x9F\x98\x80") == "caf\xC3\xA9 \xF0\x9F\x98\x80");
  CHECK(ToValidUtf8("bad \xFF byte") == "bad " + replacement + " byte");
  CHECK(ToValidUtf8("\xC0\xAF") == replacement + replacement);
  CHECK(ToValidUtf8("cut \xE2\x82") == "cut " + replacement + replacement);
  // A valid sequence right after a bad byte survives.
  CHECK(ToValidUtf8("\x80\xC3\xA9") == replacement + "\xC3\xA9");
  for (const std::string bytes : {"\xFF\xFE", "a\xED\xA0\x80z", "\xF4\x90\x80\x80", "x\xE2"}) {
    INFO(bytes);
    CHECK(IsValidUtf8(ToValidUtf8(bytes)));
  }
}

}  // namespace
}  // namespace deepool
