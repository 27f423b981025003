// The entry point every fuzz target defines (libFuzzer's, and replay_main.cc's in ordinary
// builds): parse `size` bytes of outside input, whatever they are. A crash, a sanitizer report
// or an uncaught exception is a bug; a refused input is the expected answer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace deepool::fuzz {

inline std::string_view AsText(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace deepool::fuzz
