// JobPositions (the simulator's jobs by id, rebuilt at every decision): found by binary search
// whether the list comes in id order or not; absent ids say so; a new list forgets the last.
#include "simulator/job_positions.h"

#include <catch2/catch.hpp>

namespace deepool::simulator {
namespace {

TEST_CASE("JobPositions finds jobs listed in id order and out of it", "[pool]") {
  JobPositions positions;
  SECTION("in id order") {
    for (size_t i = 0; i < 5; ++i) positions.Add(static_cast<int64_t>(10 * i + 3), i);
    CHECK(positions.Find(3) == 0);
    CHECK(positions.Find(43) == 4);
    CHECK(positions.Find(23) == 2);
    CHECK(positions.Find(24) == JobPositions::kAbsent);
    CHECK(positions.Find(50) == JobPositions::kAbsent);
  }
  SECTION("out of id order") {
    const std::vector<int64_t> ids = {7, 2, 9, 4, 1};
    for (size_t i = 0; i < ids.size(); ++i) positions.Add(ids[i], i);
    for (size_t i = 0; i < ids.size(); ++i) CHECK(positions.Find(ids[i]) == i);
    CHECK(positions.Find(3) == JobPositions::kAbsent);
    positions.Add(0, 5);  // added after a Find: still found
    CHECK(positions.Find(0) == 5);
    CHECK(positions.Find(9) == 2);
  }
  SECTION("a new list") {
    positions.Add(5, 0);
    positions.Clear();
    positions.Add(6, 0);
    CHECK(positions.Find(5) == JobPositions::kAbsent);
    CHECK(positions.Find(6) == 0);
  }
}

}  // namespace
}  // namespace deepool::simulator
