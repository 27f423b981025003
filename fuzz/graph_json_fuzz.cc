// Layer graphs (docs/formats.md "Layer graphs"): parsed, and when accepted written back and
// parsed again to the same graph.
#include <cstdlib>

#include "fuzz/fuzz_target.h"
#include "planner/graph.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto graph = deepool::planner::ParseGraphJson(deepool::fuzz::AsText(data, size));
  if (!graph.ok()) return 0;
  auto again = deepool::planner::ParseGraphJson(deepool::planner::GraphToJson(*graph));
  if (!again.ok() || again->num_layers() != graph->num_layers()) std::abort();
  return 0;
}
