// Executor event lines (stdout of deepool-executor, docs/runtime.md), as the worker daemon and
// the launcher read them.
#include "fuzz/fuzz_target.h"
#include "protocol/executor_events.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)deepool::protocol::ParseExecutorEvent(deepool::fuzz::AsText(data, size));  // any answer
  return 0;
}
