// Run specs, the executor's input file (docs/formats.md "Run specs").
#include "fuzz/fuzz_target.h"
#include "protocol/run_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)deepool::protocol::ParseRunSpecJson(deepool::fuzz::AsText(data, size));  // any answer
  return 0;
}
