#include "common/byte_size.h"

#include <catch2/catch.hpp>
#include <limits>

namespace deepool {

TEST_CASE("sizes read in the unit and the digits the message asks for", "[unit][format]") {
  CHECK(FormatBytes(int64_t{3} << 29, ByteUnit::kGiB) == "1.5 GiB");
  CHECK(FormatBytes(int64_t{80} << 30, ByteUnit::kGiB) == "80.0 GiB");
  CHECK(FormatBytes(int64_t{256} << 20, ByteUnit::kMiB) == "256.0 MiB");
  CHECK(FormatBytes((int64_t{1} << 20) + (int64_t{1} << 18), ByteUnit::kMiB, 2) == "1.25 MiB");
  CHECK(FormatBytes(0, ByteUnit::kMiB, 0) == "0 MiB");
  CHECK(FormatBytes(-(int64_t{1} << 20), ByteUnit::kMiB) == "-1.0 MiB");
  // Digits outside 0..6 are clamped, and the largest size still fits the buffer.
  CHECK(FormatBytes(int64_t{1} << 20, ByteUnit::kMiB, 40) == "1.000000 MiB");
  CHECK(FormatBytes(std::numeric_limits<int64_t>::max(), ByteUnit::kMiB, 6).size() < 64);
}

}  // namespace deepool
