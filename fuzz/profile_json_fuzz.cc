// Layer profiles in deepool's JSON format (docs/formats.md "Profiles").
#include "fuzz/fuzz_target.h"
#include "planner/profile_table.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)deepool::planner::ParseProfileJson(deepool::fuzz::AsText(data, size));  // any answer
  return 0;
}
