// Sizes in bytes as people read them, in the binary unit the message names: "12.5 MiB",
// "1.0 GiB". One formatter for every message of the project that states a size.
#pragma once

#include <cstdint>
#include <string>

namespace deepool {

enum class ByteUnit { kMiB, kGiB };

// `bytes` in `unit` with `decimals` digits after the point (0 to 6):
// FormatBytes(3 << 29, ByteUnit::kGiB) is "1.5 GiB".
std::string FormatBytes(int64_t bytes, ByteUnit unit, int decimals = 1);

}  // namespace deepool
