// What this build of deepool is: its version and the commit of its sources, for --version,
// profiles and benchmark results. The commit is read at every build (cmake/build_commit.cmake),
// so it is never that of an earlier configure.
// Threading: pure functions.
#pragma once

#include <string>

namespace deepool {

// "0.1.0" (the project's version in CMakeLists.txt).
std::string BuildVersion();
// "e955cab1f2a3", "e955cab1f2a3-dirty" (built with uncommitted changes) or "unknown".
std::string BuildCommit();
// "deepool-worker 0.1.0 (commit e955cab1f2a3)" for "deepool-worker": what --version prints.
std::string BuildDescription(const std::string& program);

}  // namespace deepool
