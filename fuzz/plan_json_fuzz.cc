// Plans (docs/formats.md "Plans"): parsed, and when accepted validated.
#include "fuzz/fuzz_target.h"
#include "planner/plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto plan = deepool::planner::ParsePlanJson(deepool::fuzz::AsText(data, size));
  if (plan.ok()) (void)plan->Validate();  // any answer
  return 0;
}
