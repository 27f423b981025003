// PathRoots: paths are resolved before they are compared with the roots, so neither ".." nor a
// symlink inside a root leads out of it; "{user}" in a root gives each job's owner a folder of
// their own.
#include "common/path_roots.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "tests/temp_dir.h"

namespace deepool {
namespace {

namespace fs = std::filesystem;
using deepool::testing::TempDir;

TEST_CASE("path roots: under a root is allowed, everything else refused with the reason",
          "[unit]") {
  TempDir dir;
  const fs::path base = fs::canonical(dir.path());
  const fs::path root = base / "checkpoints";
  fs::create_directories(root / "alice");
  fs::create_directories(base / "elsewhere");
  fs::create_directory_symlink(base / "elsewhere", root / "escape");

  auto roots = PathRoots::Make({root.string() + "/"});
  REQUIRE(roots.ok());
  CHECK(roots->restricted());
  CHECK(roots->Check("checkpoint.path", "", "").ok());
  CHECK(roots->Check("checkpoint.path", (root / "alice" / "model.pt").string(), "").ok());
  CHECK(roots->Check("checkpoint.path", (root / "new-dir" / "model.pt").string(), "").ok());
  CHECK(roots->Check("checkpoint.path", root.string(), "").ok());

  const Status dotdot =
      roots->Check("checkpoint.path", (root / ".." / "elsewhere" / "model.pt").string(), "");
  CHECK(dotdot.code() == StatusCode::kPermissionDenied);
  CHECK_THAT(dotdot.message(), Catch::Contains("outside the allowed roots"));
  const Status symlink = roots->Check("data.path", (root / "escape" / "data.bin").string(), "");
  CHECK(symlink.code() == StatusCode::kPermissionDenied);
  CHECK_THAT(symlink.message(), Catch::Contains("resolved: " + (base / "elsewhere").string()));
  // A sibling whose name starts like the root is not under it.
  CHECK(roots->Check("data.path", base.string() + "/checkpoints-old/x", "").code() ==
        StatusCode::kPermissionDenied);
  CHECK(roots->Check("data.path", "relative/x", "").code() == StatusCode::kPermissionDenied);

  CHECK(PathRoots::Make({"relative"}).status().code() == StatusCode::kInvalidArgument);
  CHECK(PathRoots().Check("data.path", "/etc/shadow", "").ok());  // unrestricted by default
}

TEST_CASE("path roots: {user} gives each owner their folder and nobody else's", "[unit]") {
  TempDir dir;
  const fs::path base = fs::canonical(dir.path());
  const fs::path users = base / "users";
  const fs::path datasets = base / "datasets";
  fs::create_directories(users / "bob" / "ckpt");
  fs::create_directories(datasets);
  auto roots = PathRoots::Make({users.string() + "/{user}", datasets.string()});
  REQUIRE(roots.ok());

  // alice's folder need not exist yet.
  CHECK(roots->Check("checkpoint.dir", (users / "alice" / "ckpt").string(), "alice").ok());
  CHECK(roots->Check("checkpoint.dir", (users / "bob" / "ckpt").string(), "bob").ok());
  const Status into_bob =
      roots->Check("checkpoint.dir", (users / "bob" / "ckpt").string(), "alice");
  CHECK(into_bob.code() == StatusCode::kPermissionDenied);
  CHECK_THAT(into_bob.message(), Catch::StartsWith("checkpoint.dir: "));
  CHECK_THAT(into_bob.message(),
             Catch::Contains("outside the allowed roots " + (users / "alice").string() + ", " +
                             datasets.string()));
  // Through alice's not yet existing folder and out again.
  CHECK(roots->Check("checkpoint.dir", (users / "alice" / ".." / "bob" / "ckpt").string(), "alice")
            .code() == StatusCode::kPermissionDenied);
  // A root without {user} is shared on purpose.
  CHECK(roots->Check("data.path", (datasets / "cifar").string(), "alice").ok());
  CHECK(roots->Check("data.path", (datasets / "cifar").string(), "bob").ok());
  // The shared parent of the users' folders is nobody's.
  CHECK(roots->Check("checkpoint.dir", (users / "x").string(), "alice").code() ==
        StatusCode::kPermissionDenied);

  // alice's folder made a symlink to bob's: paths through it resolve into bob's, refused.
  fs::create_directory_symlink(users / "bob", users / "alice");
  CHECK(roots->Check("checkpoint.dir", (users / "alice" / "ckpt").string(), "alice").code() ==
        StatusCode::kPermissionDenied);

  // No usable owner: the per-user root admits nothing, and the refusal says why.
  const Status open = roots->Check("checkpoint.dir", (users / "ckpt").string(), "");
  CHECK(open.code() == StatusCode::kPermissionDenied);
  CHECK_THAT(open.message(), Catch::Contains("outside the allowed roots " + datasets.string()));
  CHECK_THAT(open.message(), Catch::Contains("the job has no owner"));
  for (const char* name : {"..", ".", "a/b"}) {
    const fs::path target = users / name / "x";
    CHECK(roots->Check("checkpoint.dir", target.string(), name).code() ==
          StatusCode::kPermissionDenied);
  }
  CHECK(roots->Check("data.path", (datasets / "x").string(), "").ok());
}

TEST_CASE("path roots: {user} must be one whole component, given once", "[unit]") {
  CHECK(PathRoots::Make({"/shared/{user}"}).ok());
  CHECK(PathRoots::Make({"/shared/{user}/ckpt"}).ok());
  for (const char* bad : {"/shared/u-{user}", "/shared/{user}x", "/shared/{user}/{user}",
                          "/shared/{user}/../other"}) {
    CHECK(PathRoots::Make({bad}).status().code() == StatusCode::kInvalidArgument);
  }
  CHECK(CheckPathUserName("alice").ok());
  CHECK(CheckPathUserName("alice@example.org").ok());
  for (const char* bad : {"", ".", "..", "a/b"}) CHECK_FALSE(CheckPathUserName(bad).ok());
}

TEST_CASE("path roots: components after {user} are the owner's own", "[unit]") {
  TempDir dir;
  const fs::path base = fs::canonical(dir.path());
  auto roots = PathRoots::Make({(base / "{user}" / "ckpt").string()});
  REQUIRE(roots.ok());
  CHECK(roots->Check("checkpoint.dir", (base / "alice" / "ckpt" / "run1").string(), "alice").ok());
  CHECK(roots->Check("checkpoint.dir", (base / "alice" / "other").string(), "alice").code() ==
        StatusCode::kPermissionDenied);
  CHECK(roots->Check("checkpoint.dir", (base / "bob" / "ckpt").string(), "alice").code() ==
        StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace deepool
