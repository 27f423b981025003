// `deepool up` as a newcomer runs it: its summary sets the FG job's measured iteration beside
// the plan's prediction, and they must agree within a factor 2 (issue 46: the demo once predicted
// 2 ms against 29 ms measured, with an amplification of 0.05). Runs alone (RUN_SERIAL): the
// profile and the run must see the same machine, which other tests' processes would change
// between the two; a steadily loaded machine (scripts/test-under-load.sh) slows both alike.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <iostream>
#include <regex>
#include <string>
#include <utility>

#include "tests/shell_command.h"
#include "tests/temp_dir.h"

namespace {

using deepool::testing::CommandOutput;
using deepool::testing::RunShell;
using deepool::testing::TempDir;

// Runs `deepool up` once; the measured / predicted ratio and the plan's amplification it printed.
std::pair<double, double> RunDemo() {
  TempDir dir;
  const CommandOutput up =
      RunShell(std::string(DEEPOOL_BIN_DIR) + "/deepool up --data-dir " + dir.path() + " 2>&1");
  INFO(up.out);
  REQUIRE(up.exit_code == 0);
  std::smatch match;
  // "  predicted iteration 14ms (data parallel 14ms, one device 24ms); amplification 1.00 (...)"
  REQUIRE(std::regex_search(up.out, match, std::regex("amplification ([0-9.]+) \\(")));
  const double amplification = std::stod(match[1]);
  // "  measured iteration 17ms (mean of 80 iterations), 1.21x the prediction"
  REQUIRE(std::regex_search(
      up.out, match,
      std::regex("measured iteration [^\\n]*\\(mean of [0-9]+ iterations\\), ([0-9.]+)x the "
                 "prediction")));
  return {std::stod(match[1]), amplification};
}

}  // namespace

TEST_CASE("deepool up's plan predicts its FG job's iteration within a factor 2", "[e2e][demo]") {
  // Another run only when one is off: on a shared 2-core machine the profile and the run see
  // different bursts of other work. With two spinning processes and a build beside it, single
  // runs gave 0.76-2.09x (docs/benchmarks.md, "The demo's prediction"), one in four above 2x;
  // a wrong model (the 14x of issue 46) is off every time.
  bool within = false;
  for (int attempt = 0; attempt < 3 && !within; ++attempt) {
    const auto [ratio, amplification] = RunDemo();
    std::cout << "demo: measured / predicted iteration " << ratio << ", amplification "
              << amplification << "\n";
    CHECK(amplification >= 1.0);
    within = ratio >= 0.5 && ratio <= 2.0;
  }
  CHECK(within);
}
