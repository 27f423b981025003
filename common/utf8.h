// UTF-8 validity of text that came from outside (a client's strings, a user's file).
// Threading: pure functions.
#pragma once

#include <string_view>

namespace deepool {

// Whether `text` is well-formed UTF-8 (RFC 3629): no stray continuation bytes, no truncated or
// overlong sequences, no UTF-16 surrogates (U+D800..U+DFFF), nothing above U+10FFFF.
bool IsValidUtf8(std::string_view text);

}  // namespace deepool
