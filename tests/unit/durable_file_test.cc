// ReplaceFileDurably (common/durable_file.h): what a reader sees, and what an error leaves. That
// the bytes reach the disk before the rename (the fsyncs) cannot be shown without cutting the
// power; these tests check the rest of the contract.
#include "common/durable_file.h"

#include <sys/resource.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/temp_dir.h"

namespace deepool {
namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST_CASE("a file is replaced whole, with its mode, and no temporary is left", "[durable_file]") {
  testing::TempDir dir;
  const std::string path = dir.File("state.json");
  REQUIRE(ReplaceFileDurably(path, "first", 0600).ok());
  CHECK(Read(path) == "first");
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  // A temporary a crash left behind is replaced, not appended to.
  { std::ofstream(path + ".tmp") << "left by a crash, much longer than what comes next"; }
  REQUIRE(ReplaceFileDurably(path, "second").ok());
  CHECK(Read(path) == "second");
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  REQUIRE(ReplaceFileDurably(path, "").ok());
  CHECK(Read(path).empty());
}

TEST_CASE("a write that fails leaves the old file and no temporary", "[durable_file]") {
  testing::TempDir dir;
  const std::string path = dir.File("state.json");
  REQUIRE(ReplaceFileDurably(path, "old").ok());
  // Files may grow to 16 bytes at most: the write fails half-way, as on a full disk.
  auto previous_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit previous{};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &previous) == 0);
  rlimit small = previous;
  small.rlim_cur = 16;
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
  const Status failed = ReplaceFileDurably(path, std::string(1000, 'x'));
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &previous) == 0);
  std::signal(SIGXFSZ, previous_handler);
  CHECK(failed.code() == StatusCode::kDataLoss);
  CHECK_THAT(failed.message(), Catch::Contains("state.json.tmp"));
  CHECK(Read(path) == "old");
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST_CASE("a file in a missing directory is refused, and so is syncing one", "[durable_file]") {
  testing::TempDir dir;
  const Status refused = ReplaceFileDurably(dir.File("missing/state.json"), "x");
  CHECK(refused.code() == StatusCode::kUnavailable);
  CHECK_THAT(refused.message(), Catch::Contains("missing/state.json.tmp"));
  CHECK(SyncDirectory(dir.path()).ok());
  CHECK(SyncDirectory(dir.File("missing")).code() == StatusCode::kUnavailable);
}

}  // namespace
}  // namespace deepool
