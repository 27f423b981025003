// promtool's verdict on a /metrics document, for the tests that check what deepool serves the
// way Prometheus will read it.
#pragma once

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <optional>
#include <string>

#include "tests/shell_command.h"

namespace deepool::testing {

// "" when `promtool check metrics` accepts the text, its complaints otherwise; nullopt where
// promtool is not installed.
inline std::optional<std::string> PromtoolProblems(const std::string& text) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) return std::nullopt;
  char path[] = "/tmp/dp-metrics-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  REQUIRE(write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  close(fd);
  const CommandOutput check = RunShell("promtool check metrics < " + std::string(path) + " 2>&1");
  unlink(path);
  return check.exit_code == 0 ? "" : (check.out.empty() ? "promtool failed" : check.out);
}

}  // namespace deepool::testing
