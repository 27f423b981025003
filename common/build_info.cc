#include "common/build_info.h"

#include "common/build_commit.h"  // generated in the build tree

namespace deepool {

std::string BuildVersion() { return DEEPOOL_VERSION; }

std::string BuildCommit() { return DEEPOOL_BUILD_COMMIT; }

std::string BuildDescription(const std::string& program) {
  return program + " " + BuildVersion() + " (commit " + BuildCommit() + ")";
}

}  // namespace deepool
