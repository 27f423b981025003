#include "common/closest_match.h"

#include <catch2/catch.hpp>

namespace deepool {
namespace {

TEST_CASE("EditDistance counts inserts, deletes, replacements and neighbour swaps", "[suggest]") {
  CHECK(EditDistance("", "") == 0);
  CHECK(EditDistance("status", "status") == 0);
  CHECK(EditDistance("statsu", "status") == 1);  // one swap
  CHECK(EditDistance("stats", "status") == 1);   // one insert
  CHECK(EditDistance("submitt", "submit") == 1);
  CHECK(EditDistance("cancle", "cancel") == 1);
  CHECK(EditDistance("kitten", "sitting") == 3);
  CHECK(EditDistance("", "abc") == 3);
}

TEST_CASE("ClosestMatch suggests only near names", "[suggest]") {
  const std::vector<std::string> commands{"submit", "status", "cancel", "logs", "up", "plan"};
  CHECK(ClosestMatch("statsu", commands) == std::optional<std::string>("status"));
  CHECK(ClosestMatch("lgos", commands) == std::optional<std::string>("logs"));
  CHECK(ClosestMatch("pln", commands) == std::optional<std::string>("plan"));
  CHECK_FALSE(ClosestMatch("ls", commands).has_value());  // two edits from "up": not a typo
  CHECK_FALSE(ClosestMatch("frobnicate", commands).has_value());
  const std::vector<std::string> flags{"--global-batch", "--gpus", "--json"};
  CHECK(ClosestMatch("--global-bach", flags) == std::optional<std::string>("--global-batch"));
}

}  // namespace
}  // namespace deepool
