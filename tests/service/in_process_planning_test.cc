// The scheduler with the real InProcessPlanningBackend: specs whose global batch cannot train the
// model are refused at submission.
#include "coordinator/in_process_planning.h"

#include <catch2/catch.hpp>

#include "tests/service/scheduler_harness.h"

namespace deepool::coordinator::testing {
namespace {

TEST_CASE("a global batch that leaves batch norm one value per channel is refused by layer",
          "[scheduler][planner]") {
  InProcessPlanningBackend backend;
  Harness h(nullptr, &backend);
  JobSpec spec = Fg(1);
  spec.model = "inception_v3";
  spec.global_batch = 1;
  StatusOr<JobRecord> refused = h.scheduler.Submit(spec);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(refused.status().message(),
             Catch::StartsWith("global_batch") && Catch::Contains("'AuxLogits.conv1.bn'"));
  spec.global_batch = 2;
  CHECK(h.scheduler.Submit(spec).ok());
}

}  // namespace
}  // namespace deepool::coordinator::testing
