// The reference A100 profiles live beside the repository (../shared/profiles/deeppool-a100), not
// in it; DEEPOOL_A100_PROFILES overrides the folder. Tests that need them skip, saying so, on a
// checkout without them.
#pragma once

#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "tests/source_dir.h"

namespace deepool::planner::testing {

inline std::string ReferenceProfileFolder() {
  if (const char* env = std::getenv("DEEPOOL_A100_PROFILES")) return env;
  return std::string(DEEPOOL_SOURCE_DIR) + "/../shared/profiles/deeppool-a100";
}

// The file's text, or nullopt when the folder or file is absent.
inline std::optional<std::string> ReadReferenceProfile(const std::string& name) {
  std::ifstream file(ReferenceProfileFolder() + "/" + name);
  if (!file.good()) return std::nullopt;
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

}  // namespace deepool::planner::testing

// Reads a reference file into `var`, or ends the test with a "skipped: needs" warning when it is
// absent, which CTest reports as skipped (tests/CMakeLists.txt), not passed.
#define READ_REFERENCE_PROFILE_OR_SKIP(var, name)                                          \
  auto var##_or = ::deepool::planner::testing::ReadReferenceProfile(name);                 \
  if (!var##_or) {                                                                         \
    WARN("skipped: needs reference profile "                                               \
         << name << ", not found under "                                                   \
         << ::deepool::planner::testing::ReferenceProfileFolder());                        \
    return;                                                                                \
  }                                                                                        \
  const std::string var = *var##_or
