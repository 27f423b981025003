// Users files (docs/operations.md, "Security"): the coordinator re-reads one whenever it changes,
// and `deepool token` edits it. An accepted table is written back and parsed again to the same
// text.
#include <cstdlib>
#include <string>

#include "fuzz/fuzz_target.h"
#include "security/users.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using deepool::security::UserTable;
  auto table = UserTable::Parse(std::string(deepool::fuzz::AsText(data, size)));
  if (!table.ok()) return 0;
  const std::string written = table->ToJson();
  auto again = UserTable::Parse(written);
  if (!again.ok() || again->ToJson() != written) std::abort();
  return 0;
}
