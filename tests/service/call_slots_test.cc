#include "coordinator/call_slots.h"

#include <catch2/catch.hpp>
#include <vector>

namespace deepool::coordinator {
namespace {

CallSlots Streams(int total, int per_user) {
  return CallSlots(CallLimits{total, per_user}, "watch and log streams", "--max-client-streams",
                   "--max-client-streams-per-user");
}

TEST_CASE("one user's calls stop at the per-user bound, and another user's still get slots",
          "[call_slots]") {
  CallSlots slots = Streams(4, 2);
  std::vector<CallSlots::Slot> alices;
  for (int i = 0; i < 2; ++i) alices.push_back(*slots.Acquire("alice"));
  StatusOr<CallSlots::Slot> third = slots.Acquire("alice");
  REQUIRE(third.status().code() == StatusCode::kResourceExhausted);
  CHECK_THAT(third.status().message(), Catch::Contains("user alice already has 2"));
  CHECK_THAT(third.status().message(), Catch::Contains("--max-client-streams-per-user 2"));
  CHECK(slots.Acquire("bob").ok());  // given back at once: a temporary
  CHECK(slots.open("alice") == 2);
  CHECK(slots.open() == 2);
  alices.pop_back();  // a slot comes back when its call ends
  CHECK(slots.Acquire("alice").ok());
}

TEST_CASE("the bound in all holds for everyone, the anonymous user of an open coordinator too",
          "[call_slots]") {
  CallSlots slots = Streams(3, 2);
  std::vector<CallSlots::Slot> held;
  held.push_back(*slots.Acquire("alice"));
  held.push_back(*slots.Acquire(""));
  held.push_back(*slots.Acquire(""));  // no per-user bound without a name
  StatusOr<CallSlots::Slot> refused = slots.Acquire("bob");
  REQUIRE(refused.status().code() == StatusCode::kResourceExhausted);
  CHECK_THAT(refused.status().message(), Catch::Contains("already serves 3 watch and log streams"));
  CHECK_THAT(refused.status().message(), Catch::Contains("--max-client-streams)"));
  {
    CallSlots::Slot moved = std::move(held.back());
    CHECK(slots.open() == 3);
  }  // the slot comes back once, when its last owner ends
  CHECK(slots.open() == 2);
  held.pop_back();  // moved from: gives nothing back
  CHECK(slots.open() == 2);
  CHECK(slots.Acquire("bob").ok());
}

TEST_CASE("no bounds: every call gets a slot", "[call_slots]") {
  CallSlots slots = Streams(0, 0);
  std::vector<CallSlots::Slot> held;
  for (int i = 0; i < 100; ++i) held.push_back(*slots.Acquire("alice"));
  CHECK(slots.open("alice") == 100);
}

}  // namespace
}  // namespace deepool::coordinator
