// Cluster descriptions (docs/formats.md "Clusters").
#include "fuzz/fuzz_target.h"
#include "planner/cluster.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)deepool::planner::ParseClusterJson(deepool::fuzz::AsText(data, size));  // any answer
  return 0;
}
