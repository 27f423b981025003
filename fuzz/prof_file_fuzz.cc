// The A100 profiles' .prof text format (planner/a100_import.h).
#include "fuzz/fuzz_target.h"
#include "planner/a100_import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)deepool::planner::ParseProfFile(deepool::fuzz::AsText(data, size));  // any answer
  return 0;
}
