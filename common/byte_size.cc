#include "common/byte_size.h"

#include <algorithm>
#include <cstdio>

namespace deepool {

std::string FormatBytes(int64_t bytes, ByteUnit unit, int decimals) {
  const bool gib = unit == ByteUnit::kGiB;
  const double value = static_cast<double>(bytes) / static_cast<double>(gib ? 1 << 30 : 1 << 20);
  char text[64];
  std::snprintf(text, sizeof(text), "%.*f %s", std::clamp(decimals, 0, 6), value,
                gib ? "GiB" : "MiB");
  return text;
}

}  // namespace deepool
