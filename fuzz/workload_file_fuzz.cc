// Workload replay files (docs/simulator.md, "Workload traces"): JSON Lines that
// `deepool workload show` and `deepool workload simulate` read. An accepted file is written back
// and parsed again to the same text.
#include <cstdlib>
#include <string>

#include "fuzz/fuzz_target.h"
#include "simulator/workload_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using deepool::simulator::ParseWorkload;
  using deepool::simulator::WriteWorkload;
  auto workload = ParseWorkload(deepool::fuzz::AsText(data, size));
  if (!workload.ok()) return 0;
  const std::string written = WriteWorkload(*workload);
  auto again = ParseWorkload(written);
  if (!again.ok() || WriteWorkload(*again) != written) std::abort();
  return 0;
}
