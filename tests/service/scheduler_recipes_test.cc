// A job with training recipes (optimizer decay_1d, schedule, clip_grad_norm) waits for workers
// that read executor protocol 7, saying so, and its run spec carries them (the scheduler
// harness: FakeClock, fake planning backend, fake workers).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "coordinator/scheduler.h"
#include "tests/service/scheduler_harness.h"

namespace deepool::coordinator {
namespace {

using testing::Fg;
using testing::Harness;

TEST_CASE("a job with training recipes waits for protocol 7 and its run spec carries them",
          "[scheduler][version][recipes]") {
  Harness h;
  h.AddNode("six", 1, "cpu", {}, protocol::ProtocolRange{1, 6});
  JobSpec job = Fg(1);
  job.optimizer.name = "adamw";
  job.optimizer.decay_1d = false;
  job.optimizer.clip_grad_norm = 1.0;
  job.optimizer.schedule = protocol::LrScheduleSpec{"cosine", 5, 0.0};
  JobRecord waiting = h.Submit(job);
  h.scheduler.Tick();
  CHECK(h.Get(waiting.id).state == JobState::kPending);
  CHECK(h.Get(waiting.id).reason ==
        "needs workers that speak executor protocol 7 (training recipes); 1 of 1 nodes speak "
        "only 6: upgrade them");
  h.AddNode("new", 1);
  h.scheduler.Tick();
  REQUIRE(h.Get(waiting.id).state == JobState::kRunning);
  std::vector<v1::TaskCommand> commands = h.Commands("node-new");
  REQUIRE(commands.size() == 1);
  const nlohmann::json spec = nlohmann::json::parse(commands[0].assign().train().run_spec_json());
  CHECK(spec["version"] == protocol::kRecipesProtocolVersion);
  CHECK(spec["optimizer"]["decay_1d"] == false);
  CHECK(spec["optimizer"]["clip_grad_norm"] == 1.0);
  CHECK(spec["optimizer"]["schedule"] ==
        nlohmann::json{{"kind", "cosine"}, {"warmup_iterations", 5}, {"min_lr", 0.0}});
}

}  // namespace
}  // namespace deepool::coordinator
