// Checks of text that came from outside (a client's strings, a user's file): UTF-8 validity, and
// no characters that could move a terminal's cursor when others see the text.
// Threading: pure functions.
#pragma once

#include <string>
#include <string_view>

namespace deepool {

// Whether `text` is well-formed UTF-8 (RFC 3629): no stray continuation bytes, no truncated or
// overlong sequences, no UTF-16 surrogates (U+D800..U+DFFF), nothing above U+10FFFF.
bool IsValidUtf8(std::string_view text);

// `text` with every byte that starts no well-formed sequence replaced by U+FFFD: for text a
// process printed (a log line, an error quoting a file name) that must travel in a protobuf
// string field, which refuses invalid UTF-8. Valid text comes back unchanged.
std::string ToValidUtf8(std::string_view text);

// Whether `text` holds a C0 control character or DEL: text a client sets that others see in
// tables and logs must not move a terminal's cursor or start an escape sequence.
bool HasControlCharacters(std::string_view text);

}  // namespace deepool
