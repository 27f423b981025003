// promtool's verdict on a /metrics document, for the tests that check what deepool serves the
// way Prometheus will read it.
#pragma once

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

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
  FILE* pipe = popen(("promtool check metrics < " + std::string(path) + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  char buffer[512];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  const int status = pclose(pipe);
  unlink(path);
  return status == 0 ? "" : (out.empty() ? "promtool failed" : out);
}

}  // namespace deepool::testing
