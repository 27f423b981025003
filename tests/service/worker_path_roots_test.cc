// The worker's own check of a run spec's paths, made before any executor starts: the coordinator
// checked them at submission on its view of the file system, the worker checks on its own.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "tests/temp_dir.h"
#include "worker/daemon/executor_supervisor.h"

namespace deepool::worker::daemon {
namespace {

TEST_CASE(
    "a run spec whose checkpoint, checkpoint directory, data, evaluation data or initial weights "
    "path leaves the worker's roots is refused",
    "[service][security]") {
  auto roots = PathRoots::Make({"/srv/deepool"});
  REQUIRE(roots.ok());
  CHECK(CheckRunSpecPaths(*roots, R"({"checkpoint":{"path":"/srv/deepool/a.pt"}})", "").ok());
  CHECK(CheckRunSpecPaths(*roots, R"({"checkpoint":{"path":"/etc/cron.d/x"}})", "").code() ==
        StatusCode::kPermissionDenied);
  CHECK(
      CheckRunSpecPaths(*roots, R"({"data":{"kind":"cifar10","path":"/root/.ssh"}})", "").code() ==
      StatusCode::kPermissionDenied);
  const Status background = CheckRunSpecPaths(
      *roots, R"({"background":{"job_id":"j","data":{"kind":"cifar10","path":"/home/x"}}})", "");
  CHECK(background.code() == StatusCode::kPermissionDenied);
  CHECK_THAT(background.message(), Catch::Contains("background.data.path"));
  // Periodic checkpoint directories, the job's own and a BG job's: a worker must not create and
  // prune checkpoints wherever a run spec says.
  CHECK(CheckRunSpecPaths(*roots, R"({"checkpoint":{"dir":"/srv/deepool/ckpt"}})", "").ok());
  CHECK(CheckRunSpecPaths(*roots, R"({"checkpoint":{"dir":"/var/lib/x"}})", "").code() ==
        StatusCode::kPermissionDenied);
  const Status bg_dir = CheckRunSpecPaths(
      *roots, R"({"background":{"job_id":"j","checkpoint":{"dir":"/tmp/elsewhere"}}})", "");
  CHECK(bg_dir.code() == StatusCode::kPermissionDenied);
  CHECK_THAT(bg_dir.message(), Catch::Contains("background.checkpoint.dir"));
  // The held-out set an evaluation reads, and the initial weights every rank loads.
  CHECK(CheckRunSpecPaths(*roots, R"({"eval":{"data":{"kind":"cifar10","path":"/srv/deepool/v"}}})",
                          "")
            .ok());
  const Status eval =
      CheckRunSpecPaths(*roots, R"({"eval":{"data":{"kind":"cifar10","path":"/home/x/val"}}})", "");
  CHECK(eval.code() == StatusCode::kPermissionDenied);
  CHECK_THAT(eval.message(), Catch::Contains("eval.data.path"));
  const Status init = CheckRunSpecPaths(*roots, R"({"init":{"path":"/home/x/w.safetensors"}})", "");
  CHECK(init.code() == StatusCode::kPermissionDenied);
  CHECK_THAT(init.message(), Catch::Contains("init.path"));
  CHECK(CheckRunSpecPaths(*roots, "not json", "").code() == StatusCode::kInvalidArgument);
  CHECK(CheckRunSpecPaths(PathRoots(), R"({"checkpoint":{"path":"/etc/x"}})", "").ok());
}

// Takes nothing; the tests below never get as far as an executor.
class NoListener : public TaskListener {
 public:
  void OnStoreReady(const std::string&, const std::string&, int) override {}
  void OnIteration(const std::string&, const IterationReport&) override {}
  void OnLogLine(const std::string&, int, const std::string&) override {}
  void OnTaskFinished(const TaskResult&) override {}
};

TEST_CASE("with per-user roots, a task of alice's that points into bob's folder is refused",
          "[service][security]") {
  namespace fs = std::filesystem;
  deepool::testing::TempDir dir;
  const fs::path base = fs::canonical(dir.path());
  const std::string users = (base / "users").string();
  fs::create_directories(users + "/bob/ckpt");
  auto roots = PathRoots::Make({users + "/{user}", "/datasets"});
  REQUIRE(roots.ok());

  const std::string into_bob = R"({"checkpoint":{"dir":")" + users + R"(/bob/ckpt"}})";
  const std::string own = R"({"checkpoint":{"dir":")" + users + R"(/alice/ckpt"}})";
  CHECK(CheckRunSpecPaths(*roots, own, "alice").ok());
  CHECK(CheckRunSpecPaths(*roots, into_bob, "bob").ok());
  const Status refused = CheckRunSpecPaths(*roots, into_bob, "alice");
  CHECK(refused.code() == StatusCode::kPermissionDenied);
  CHECK_THAT(refused.message(), Catch::Contains("checkpoint.dir"));
  CHECK_THAT(refused.message(), Catch::Contains(users + "/alice"));
  // Without an owner (an open coordinator) a per-user root admits nothing; shared ones still do.
  CHECK(CheckRunSpecPaths(*roots, own, "").code() == StatusCode::kPermissionDenied);
  CHECK(CheckRunSpecPaths(*roots, R"({"data":{"kind":"cifar10","path":"/datasets/c"}})", "").ok());

  // The supervisor checks with the owner the task names, before it creates anything.
  SupervisorOptions options;
  options.executor_path = (base / "no-executor").string();
  options.work_dir = (base / "work").string();
  options.path_roots = *roots;
  NoListener listener;
  ExecutorSupervisor supervisor(options, &listener);
  TrainTask train;
  train.task_id = "j1.a1.n1";
  train.job_id = "j1";
  train.run_spec_json = into_bob;
  train.world_size = 1;
  train.store_host = "127.0.0.1";
  train.ranks = {RankAssignment{0, "cpu", "cpu:0"}};
  train.owner = "alice";
  const Status train_refused = supervisor.StartTrain(train);
  CHECK(train_refused.code() == StatusCode::kPermissionDenied);
  CHECK_THAT(train_refused.message(), Catch::Contains("checkpoint.dir"));
  CHECK_FALSE(fs::exists(base / "work" / "tasks" / train.task_id));
  // Her own folder passes the check (the missing executor is another matter).
  train.task_id = "j1.a2.n1";
  train.run_spec_json = own;
  CHECK(supervisor.StartTrain(train).code() != StatusCode::kPermissionDenied);

  // A BG job hosted in another job's executor is checked as its own owner's.
  HostedBackgroundTask hosted;
  hosted.task_id = "bg1.a1.n1";
  hosted.job_id = "bg1";
  hosted.host_task_id = "j2.a1.n1";
  hosted.background_json = R"({"job_id":"bg1","checkpoint":{"dir":")" + users + R"(/bob/bg"}})";
  hosted.owner = "alice";
  const Status hosted_refused = supervisor.StartHosted(hosted);
  CHECK(hosted_refused.code() == StatusCode::kPermissionDenied);
  CHECK_THAT(hosted_refused.message(), Catch::Contains("background.checkpoint.dir"));
  hosted.owner = "bob";  // his own folder: past the check, refused only for want of a host
  CHECK(supervisor.StartHosted(hosted).code() == StatusCode::kNotFound);
  supervisor.Shutdown();
}

}  // namespace
}  // namespace deepool::worker::daemon
