// LogLimiter: a burst per window goes through, the rest is counted and reported with the next
// line that goes through; windows follow the injected clock.
#include "common/log_limiter.h"

#include <catch2/catch.hpp>

namespace deepool {
namespace {

using std::chrono::seconds;

TEST_CASE("a log limiter lets a burst through per window and counts the rest", "[unit]") {
  FakeClock clock;
  LogLimiter limiter(&clock, 3, seconds(60));
  int64_t held_back = -1;
  for (int i = 0; i < 3; ++i) {
    REQUIRE(limiter.Allow(&held_back));
    CHECK(held_back == 0);
  }
  for (int i = 0; i < 1000; ++i) CHECK_FALSE(limiter.Allow(&held_back));
  clock.Advance(seconds(59));
  CHECK_FALSE(limiter.Allow(&held_back));  // still the same window
  clock.Advance(seconds(1));
  REQUIRE(limiter.Allow(&held_back));
  CHECK(held_back == 1001);  // the next line says how many were left out
  REQUIRE(limiter.Allow(&held_back));
  CHECK(held_back == 0);
}

}  // namespace
}  // namespace deepool
