// Runs a command line through the shell for a test: its exit code and what it wrote to stdout
// (append " 2>&1" to the command for stderr too; otherwise stderr goes to the test's log).
#pragma once

#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <string>

namespace deepool::testing {

struct CommandOutput {
  int exit_code = -1;  // -1 when a signal ended the shell
  std::string out;
};

inline CommandOutput RunShell(const std::string& command) {
  CommandOutput result;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.out.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace deepool::testing
