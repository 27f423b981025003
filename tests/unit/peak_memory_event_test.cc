// Iteration events carry the rank's peak memory (protocol/executor_events.h): written when
// known, read back, and absent from older executors' events.
#include <catch2/catch.hpp>
#include <string>
#include <variant>

#include "protocol/executor_events.h"

namespace deepool::protocol {
namespace {

TEST_CASE("An iteration event carries the peak memory and older events read as 0") {
  IterationEvent event;
  event.rank = 1;
  event.iteration = 3;
  event.peak_memory_bytes = int64_t{5} << 30;
  const std::string line = ExecutorEventToJson(event);
  CHECK_THAT(line, Catch::Contains("\"peak_memory_bytes\":5368709120"));
  StatusOr<ExecutorEvent> parsed = ParseExecutorEvent(line);
  REQUIRE(parsed.ok());
  const auto* iteration = std::get_if<IterationEvent>(&*parsed);
  REQUIRE(iteration != nullptr);
  CHECK(iteration->peak_memory_bytes == int64_t{5} << 30);

  event.peak_memory_bytes = 0;
  const std::string old = ExecutorEventToJson(event);
  CHECK_THAT(old, !Catch::Contains("peak_memory_bytes"));
  parsed = ParseExecutorEvent(old);
  REQUIRE(parsed.ok());
  CHECK(std::get<IterationEvent>(*parsed).peak_memory_bytes == 0);
}

}  // namespace
}  // namespace deepool::protocol
