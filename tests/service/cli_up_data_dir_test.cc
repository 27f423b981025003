// `deepool up`'s data folder: it claims only a new, empty or earlier up's folder (so it never
// deletes files it did not make), and its path root keeps jobs away from its database and keys
// and from other users' files.
#include "cli/services/up_data_dir.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "common/path_roots.h"
#include "tests/temp_dir.h"

namespace deepool::cli {
namespace {

namespace fs = std::filesystem;
using deepool::testing::TempDir;

void Touch(const fs::path& file) {
  fs::create_directories(file.parent_path());
  std::ofstream(file) << "the user's\n";
}

TEST_CASE("deepool up claims a new, empty or earlier up's folder, and nothing else",
          "[service][security]") {
  TempDir dir;
  const fs::path base = fs::canonical(dir.path());
  CHECK(ClaimUpDataDir(base / "new" / "dir").ok());
  CHECK(fs::exists(base / "new" / "dir" / kUpDataDirMarker));
  fs::create_directory(base / "empty");
  CHECK(ClaimUpDataDir(base / "empty").ok());
  CHECK(ClaimUpDataDir(base / "empty").ok());  // up's own, from the run before

  // The user's folder, with a security/ of their own that up would remake: refused, untouched.
  const fs::path theirs = base / "theirs";
  Touch(theirs / "security" / "ca-key.pem");
  Touch(theirs / "notes.txt");
  const Status refused = ClaimUpDataDir(theirs);
  CHECK(refused.code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(refused.message(), Catch::Contains("not made by deepool up"));
  CHECK(fs::exists(theirs / "security" / "ca-key.pem"));
  CHECK(fs::exists(theirs / "notes.txt"));
  CHECK_FALSE(fs::exists(theirs / kUpDataDirMarker));
  Touch(base / "a-file");
  CHECK(ClaimUpDataDir(base / "a-file").code() == StatusCode::kFailedPrecondition);
}

TEST_CASE("deepool up's path root holds each user's jobs, apart from its state and keys",
          "[service][security]") {
  TempDir temp;
  const fs::path dir = fs::canonical(temp.path());
  for (const char* sub : {"coordinator", "security", "local-0", "jobs/admin"}) {
    fs::create_directories(dir / sub);
  }
  auto roots = PathRoots::Make({UpPathRoot(dir)});
  REQUIRE(roots.ok());
  CHECK(roots->Check("checkpoint.path", (UpJobsDir(dir) / "admin" / "demo.ckpt").string(), "admin")
            .ok());
  for (const fs::path& secret :
       {dir / "coordinator" / "coordinator.db", dir / "security" / "ca-key.pem",
        dir / "security" / "users.json", dir / "local-0" / "tasks" / "x", dir / "coordinator.log",
        UpJobsDir(dir) / "bob" / "ckpt"}) {
    CHECK(roots->Check("checkpoint.path", secret.string(), "admin").code() ==
          StatusCode::kPermissionDenied);
  }
}

}  // namespace
}  // namespace deepool::cli
