// Executor command lines (stdin of deepool-executor: attach/detach a BG job).
#include "fuzz/fuzz_target.h"
#include "protocol/executor_commands.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)deepool::protocol::ParseExecutorCommand(deepool::fuzz::AsText(data, size));  // any answer
  return 0;
}
