// The open-file limit a daemon asks for and needs, the connections it leaves room for, and the
// systemd units that set it: they and the code must name the same number.
#include "common/open_files.h"

#include <sys/resource.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <regex>
#include <sstream>

#include "common/limits.h"
#include "tests/source_dir.h"

namespace deepool {
namespace {

TEST_CASE("the soft limit is raised toward the wanted one, as far as the hard limit allows",
          "[open_files]") {
  CHECK(WantedSoftLimit({1024, 1048576}) == kOpenFilesWanted);
  CHECK(WantedSoftLimit({1024, RLIM_INFINITY}) == kOpenFilesWanted);
  CHECK(WantedSoftLimit({1024, 4096}) == 4096);
  CHECK(WantedSoftLimit({1024, 1024}) == 1024);
  // Never lowered: an operator who set more keeps it.
  CHECK(WantedSoftLimit({200000, 200000}) == 200000);
}

TEST_CASE("a limit below the minimum is refused, saying how to raise it", "[open_files]") {
  CHECK(CheckOpenFileLimit({kMinOpenFiles, kMinOpenFiles}, "deepool-coordinator").ok());
  const Status low = CheckOpenFileLimit({512, 512}, "deepool-coordinator");
  REQUIRE_FALSE(low.ok());
  CHECK(low.code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(low.message(), Catch::Contains("deepool-coordinator") && Catch::Contains("512") &&
                                Catch::Contains("LimitNOFILE=65536") &&
                                Catch::Contains("ulimit -n"));
}

TEST_CASE("connections get the open-file limit less the reserve, within the flag", "[open_files]") {
  CHECK(ConnectionBudget(kOpenFilesWanted, 4096) == 4096);
  CHECK(ConnectionBudget(kMinOpenFiles, 4096) == 1024 - 256);
  CHECK(ConnectionBudget(2048, 100) == 100);
  CHECK(ConnectionBudget(100, 4096) == 1);  // below the reserve: one, never zero or negative
}

TEST_CASE("raising the limit at start leaves at least what was there", "[open_files]") {
  auto before = ReadOpenFileLimit();
  REQUIRE(before.ok());
  auto raised = RaiseOpenFileLimit("test");
  if (before->soft < kMinOpenFiles && before->hard < kMinOpenFiles) {
    CHECK_FALSE(raised.ok());
    return;
  }
  REQUIRE(raised.ok());
  CHECK(raised->soft == WantedSoftLimit(*before));
  auto after = ReadOpenFileLimit();
  REQUIRE(after.ok());
  CHECK(after->soft == raised->soft);
}

// LimitNOFILE=N in a unit file; 0 when it has none.
uint64_t UnitLimitNofile(const std::string& unit) {
  std::ifstream in(std::string(DEEPOOL_SOURCE_DIR) + "/deploy/" + unit);
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  std::smatch found;
  const std::string body = text.str();
  if (!std::regex_search(body, found, std::regex(R"((^|\n)LimitNOFILE=(\d+)\s*\n)"))) return 0;
  return std::stoull(found[2].str());
}

TEST_CASE("the systemd units set the open-file limit the daemons want", "[open_files]") {
  CHECK(UnitLimitNofile("deepool-coordinator.service") == kOpenFilesWanted);
  CHECK(UnitLimitNofile("deepool-worker.service") == kOpenFilesWanted);
}

}  // namespace
}  // namespace deepool
