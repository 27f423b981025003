// The worker's own check of a run spec's paths, made before any executor starts: the coordinator
// checked them at submission on its view of the file system, the worker checks on its own.
#include <catch2/catch.hpp>
#include <filesystem>

#include "worker/daemon/executor_supervisor.h"

namespace deepool::worker::daemon {
namespace {

TEST_CASE(
    "a run spec whose checkpoint, checkpoint directory or data path leaves the worker's roots is "
    "refused",
    "[service][security]") {
  auto roots = PathRoots::Make({"/srv/deepool"});
  REQUIRE(roots.ok());
  CHECK(CheckRunSpecPaths(*roots, R"({"checkpoint":{"path":"/srv/deepool/a.pt"}})").ok());
  CHECK(CheckRunSpecPaths(*roots, R"({"checkpoint":{"path":"/etc/cron.d/x"}})").code() ==
        StatusCode::kPermissionDenied);
  CHECK(CheckRunSpecPaths(*roots, R"({"data":{"kind":"cifar10","path":"/root/.ssh"}})").code() ==
        StatusCode::kPermissionDenied);
  const Status background = CheckRunSpecPaths(
      *roots, R"({"background":{"job_id":"j","data":{"kind":"cifar10","path":"/home/x"}}})");
  CHECK(background.code() == StatusCode::kPermissionDenied);
  CHECK_THAT(background.message(), Catch::Contains("background.data.path"));
  // Periodic checkpoint directories, the job's own and a BG job's: a worker must not create and
  // prune checkpoints wherever a run spec says.
  CHECK(CheckRunSpecPaths(*roots, R"({"checkpoint":{"dir":"/srv/deepool/ckpt"}})").ok());
  CHECK(CheckRunSpecPaths(*roots, R"({"checkpoint":{"dir":"/var/lib/x"}})").code() ==
        StatusCode::kPermissionDenied);
  const Status bg_dir = CheckRunSpecPaths(
      *roots, R"({"background":{"job_id":"j","checkpoint":{"dir":"/tmp/elsewhere"}}})");
  CHECK(bg_dir.code() == StatusCode::kPermissionDenied);
  CHECK_THAT(bg_dir.message(), Catch::Contains("background.checkpoint.dir"));
  CHECK(CheckRunSpecPaths(*roots, "not json").code() == StatusCode::kInvalidArgument);
  CHECK(CheckRunSpecPaths(PathRoots(), R"({"checkpoint":{"path":"/etc/x"}})").ok());
}

}  // namespace
}  // namespace deepool::worker::daemon
