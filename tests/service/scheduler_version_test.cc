// Placement by executor protocol version: a job whose run spec needs a newer version than a
// node speaks waits, saying why, and the run spec goes out at the version its features need
// (the scheduler harness: FakeClock, fake planning backend, fake workers).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "coordinator/scheduler.h"
#include "tests/service/scheduler_harness.h"

namespace deepool::coordinator {
namespace {

using testing::Fg;
using testing::Harness;

// The run spec of the one train command `node` got.
nlohmann::json OnlyRunSpec(Harness& h, const std::string& node) {
  std::vector<v1::TaskCommand> commands = h.Commands(node);
  REQUIRE(commands.size() == 1);
  return nlohmann::json::parse(commands[0].assign().train().run_spec_json());
}

TEST_CASE("run specs go out at the version each job needs, onto nodes that read it",
          "[scheduler][version]") {
  Harness h;
  h.AddNode("old", 1, "cpu", {}, protocol::ProtocolRange{1, 1});
  JobSpec adamw = Fg(1);
  adamw.optimizer.name = "adamw";
  JobRecord waiting = h.Submit(adamw);
  h.scheduler.Tick();
  CHECK(h.Get(waiting.id).state == JobState::kPending);
  CHECK(h.Get(waiting.id).reason_code == ReasonCode::kWorkerProtocol);
  CHECK(h.Get(waiting.id).reason ==
        "needs workers that speak executor protocol 2 (adamw); 1 of 1 nodes speak only 1: "
        "upgrade them");
  JobRecord sgd = h.Submit(Fg(1));
  h.scheduler.Tick();
  REQUIRE(h.Get(sgd.id).state == JobState::kRunning);
  CHECK(OnlyRunSpec(h, "node-old")["version"] == 1);

  h.AddNode("new", 1);  // this build's whole range
  h.scheduler.Tick();
  REQUIRE(h.Get(waiting.id).state == JobState::kRunning);
  const nlohmann::json spec = OnlyRunSpec(h, "node-new");
  CHECK(spec["version"] == 2);
  CHECK(spec["optimizer"]["name"] == "adamw");
  // The version placement asked for is the one the run spec is written at.
  CHECK(spec["version"] == jobspec::RequiredProtocolVersion(adamw));
  CHECK(jobspec::RequiredProtocolVersion(Fg(1)) == 1);
}

TEST_CASE("an image_folder job waits for workers that read protocol 3", "[scheduler][version]") {
  Harness h;
  h.AddNode("two", 1, "cpu", {}, protocol::ProtocolRange{1, 2});
  JobSpec images = Fg(1);
  images.data.kind = "image_folder";
  images.data.path = "/data/train";
  JobRecord job = h.Submit(images);
  h.scheduler.Tick();
  CHECK(h.Get(job.id).state == JobState::kPending);
  CHECK(h.Get(job.id).reason ==
        "needs workers that speak executor protocol 3 (image_folder data); 1 of 1 nodes speak "
        "only 2: upgrade them");
  h.AddNode("new", 1);
  h.scheduler.Tick();
  REQUIRE(h.Get(job.id).state == JobState::kRunning);
  const nlohmann::json spec = OnlyRunSpec(h, "node-new");
  CHECK(spec["version"] == 3);
  CHECK(spec["data"]["kind"] == "image_folder");
  CHECK(spec["data"]["path"] == "/data/train");
}

TEST_CASE("an evaluated job waits for workers that read protocol 4 and gets eval in its run spec",
          "[scheduler][version][eval]") {
  Harness h;
  h.AddNode("three", 1, "cpu", {}, protocol::ProtocolRange{1, 3});
  JobSpec evaluated = Fg(1);
  evaluated.data.kind = "image_folder";  // needs 3; the eval needs 4
  evaluated.data.path = "/data/train";
  evaluated.eval = jobspec::EvalSpec{{"image_folder", 5, "/data/val", 2}, 50};
  evaluated.eval->batch = 96;
  JobRecord job = h.Submit(evaluated);
  h.scheduler.Tick();
  CHECK(h.Get(job.id).state == JobState::kPending);
  CHECK(h.Get(job.id).reason_code == ReasonCode::kWorkerProtocol);
  CHECK(h.Get(job.id).reason ==
        "needs workers that speak executor protocol 4 (evaluation); 1 of 1 nodes speak only 3: "
        "upgrade them");
  h.AddNode("new", 1);
  h.scheduler.Tick();
  REQUIRE(h.Get(job.id).state == JobState::kRunning);
  const nlohmann::json spec = OnlyRunSpec(h, "node-new");
  CHECK(spec["version"] == 4);
  CHECK(spec["version"] == jobspec::RequiredProtocolVersion(evaluated));
  CHECK(spec["eval"]["every_iterations"] == 50);
  CHECK(spec["eval"]["data"]["kind"] == "image_folder");
  CHECK(spec["eval"]["data"]["path"] == "/data/val");
  CHECK(spec["eval"]["data"]["seed"] == 5);
  CHECK(spec["eval"]["data"]["skip_bad"] == 2);
  CHECK(spec["eval"]["batch"] == 96);
  // A job without eval gets none, and runs on the older node.
  JobRecord plain = h.Submit(Fg(1));
  h.scheduler.Tick();
  REQUIRE(h.Get(plain.id).state == JobState::kRunning);
  CHECK_FALSE(OnlyRunSpec(h, "node-three").contains("eval"));
}

TEST_CASE("an epochs job waits for workers that read protocol 5 and gets epochs in its run spec",
          "[scheduler][version][epochs]") {
  Harness h;
  h.AddNode("four", 1, "cpu", {}, protocol::ProtocolRange{1, 4});
  JobSpec by_epochs = Fg(1);
  by_epochs.iterations = 0;
  by_epochs.epochs = 3;
  JobRecord job = h.Submit(by_epochs);
  CHECK(h.Get(job.id).progress.iterations == 0);  // the executors will count them
  h.scheduler.Tick();
  CHECK(h.Get(job.id).state == JobState::kPending);
  CHECK(h.Get(job.id).reason ==
        "needs workers that speak executor protocol 5 (epochs); 1 of 1 nodes speak only 4: "
        "upgrade them");
  h.AddNode("new", 1);
  h.scheduler.Tick();
  REQUIRE(h.Get(job.id).state == JobState::kRunning);
  const nlohmann::json spec = OnlyRunSpec(h, "node-new");
  CHECK(spec["version"] == 5);
  CHECK(spec["epochs"] == 3);
  CHECK_FALSE(spec.contains("iterations"));
}

TEST_CASE("a job's init reaches its run spec at protocol 6", "[scheduler][version][init]") {
  Harness h;
  h.AddNode("a", 1);
  JobSpec from_weights = Fg(1);
  from_weights.init_path = "/weights/small.safetensors";
  JobRecord job = h.Submit(from_weights);
  h.scheduler.Tick();
  REQUIRE(h.Get(job.id).state == JobState::kRunning);
  const nlohmann::json spec = OnlyRunSpec(h, "node-a");
  CHECK(spec["version"] == 6);
  CHECK(spec["init"]["path"] == "/weights/small.safetensors");
}

}  // namespace
}  // namespace deepool::coordinator
