// PathRoots: paths are resolved before they are compared with the roots, so neither ".." nor a
// symlink inside a root leads out of it.
#include "common/path_roots.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>

namespace deepool {
namespace {

namespace fs = std::filesystem;

TEST_CASE("path roots: under a root is allowed, everything else refused with the reason",
          "[unit]") {
  std::string pattern = (fs::temp_directory_path() / "dp-roots-XXXXXX").string();
  REQUIRE(mkdtemp(pattern.data()) != nullptr);
  const fs::path base = fs::canonical(pattern);
  const fs::path root = base / "checkpoints";
  fs::create_directories(root / "alice");
  fs::create_directories(base / "elsewhere");
  fs::create_directory_symlink(base / "elsewhere", root / "escape");

  auto roots = PathRoots::Make({root.string() + "/"});
  REQUIRE(roots.ok());
  CHECK(roots->restricted());
  CHECK(roots->Check("checkpoint.path", "").ok());
  CHECK(roots->Check("checkpoint.path", (root / "alice" / "model.pt").string()).ok());
  CHECK(roots->Check("checkpoint.path", (root / "new-dir" / "model.pt").string()).ok());
  CHECK(roots->Check("checkpoint.path", root.string()).ok());

  const Status dotdot =
      roots->Check("checkpoint.path", (root / ".." / "elsewhere" / "model.pt").string());
  CHECK(dotdot.code() == StatusCode::kPermissionDenied);
  CHECK_THAT(dotdot.message(), Catch::Contains("outside the allowed roots"));
  const Status symlink = roots->Check("data.path", (root / "escape" / "data.bin").string());
  CHECK(symlink.code() == StatusCode::kPermissionDenied);
  CHECK_THAT(symlink.message(), Catch::Contains("resolved: " + (base / "elsewhere").string()));
  // A sibling whose name starts like the root is not under it.
  CHECK(roots->Check("data.path", base.string() + "/checkpoints-old/x").code() ==
        StatusCode::kPermissionDenied);
  CHECK(roots->Check("data.path", "relative/x").code() == StatusCode::kPermissionDenied);

  CHECK(PathRoots::Make({"relative"}).status().code() == StatusCode::kInvalidArgument);
  CHECK(PathRoots().Check("data.path", "/etc/shadow").ok());  // unrestricted by default
  fs::remove_all(base);
}

}  // namespace
}  // namespace deepool
