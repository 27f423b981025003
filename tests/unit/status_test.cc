#include <catch2/catch.hpp>

#include "common/clock.h"
#include "common/status.h"

namespace deepool {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgumentError("odd: " + std::to_string(x));
  return x / 2;
}

StatusOr<int> Quarter(int x) {
  ASSIGN_OR_RETURN(int half, Half(x));
  ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

Status CheckEven(int x) {
  RETURN_IF_ERROR(Half(x).status());
  return Status::Ok();
}

TEST_CASE("status codes have gRPC's numbers and names", "[status]") {
  CHECK(static_cast<int>(StatusCode::kInvalidArgument) == 3);
  CHECK(static_cast<int>(StatusCode::kNotFound) == 5);
  CHECK(static_cast<int>(StatusCode::kFailedPrecondition) == 9);
  CHECK(static_cast<int>(StatusCode::kUnavailable) == 14);
  CHECK(static_cast<int>(StatusCode::kUnauthenticated) == 16);
  CHECK(std::string(StatusCodeName(StatusCode::kDeadlineExceeded)) == "DEADLINE_EXCEEDED");
  CHECK(NotFoundError("job 7").ToString() == "NOT_FOUND: job 7");
  CHECK(Status::Ok().ToString() == "OK");
}

TEST_CASE("StatusOr and the early-return macros", "[status]") {
  CHECK(*Quarter(8) == 2);
  auto odd = Quarter(6);
  REQUIRE_FALSE(odd.ok());
  CHECK(odd.status().message() == "odd: 3");
  CHECK(CheckEven(4).ok());
  CHECK(CheckEven(5).code() == StatusCode::kInvalidArgument);
  CHECK(Quarter(6).value_or(-1) == -1);
  CHECK(InternalError("x").WithContext("loading").message() == "loading: x");
}

TEST_CASE("the fake clock moves only when advanced", "[clock]") {
  FakeClock clock(1000);
  auto start = clock.Now();
  CHECK(clock.Now() == start);
  clock.Advance(std::chrono::seconds(3));
  CHECK(clock.Now() - start == std::chrono::seconds(3));
  CHECK(clock.WallMillis() == 4000);
  SystemClock real;
  auto first = real.Now();
  auto second = real.Now();
  CHECK(first <= second);
}

}  // namespace
}  // namespace deepool
