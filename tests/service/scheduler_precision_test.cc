// A job's precision through the coordinator (docs/coordinator.md, "Precision"): the precision a
// job asks for, or the default for the devices it is placed on, is what it is planned at (the
// plan's profile_source says which profile timed it) and what its run spec and its BG spec
// carry; jobs that need executor protocol 6 wait for workers that read it. The scheduler
// harness with the real InProcessPlanningBackend (FakeClock, fake workers).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "coordinator/in_process_planning.h"
#include "coordinator/profile_cache_key.h"
#include "tests/service/scheduler_harness.h"

namespace deepool::coordinator::testing {
namespace {

using planner::Precision;

// small_cnn, which the real backend plans (the fake harness's "tiny" is no zoo model).
JobSpec SmallCnn(int gpus) {
  JobSpec spec = Fg(gpus);
  spec.model = "small_cnn";
  return spec;
}

// The run spec and the plan of the one train command `node` got.
struct Sent {
  nlohmann::json run_spec;
  nlohmann::json plan;
};
Sent OnlyTrain(Harness& h, const std::string& node) {
  std::vector<v1::TaskCommand> commands = h.Commands(node);
  REQUIRE(commands.size() == 1);
  REQUIRE(commands[0].assign().has_train());
  nlohmann::json run_spec = nlohmann::json::parse(commands[0].assign().train().run_spec_json());
  nlohmann::json plan = run_spec["plan"];
  return {std::move(run_spec), std::move(plan)};
}

TEST_CASE("a bf16 job is planned and run at bf16 on workers that read protocol 6",
          "[scheduler][precision]") {
  InProcessPlanningBackend backend;
  Harness h(nullptr, &backend);
  h.AddNode("old", 2, "cpu", {}, protocol::ProtocolRange{1, 5});
  JobSpec bf16 = SmallCnn(2);
  bf16.precision = Precision::kBf16;
  JobRecord job = h.Submit(bf16);
  h.scheduler.Tick();
  CHECK(h.Get(job.id).state == JobState::kPending);
  CHECK(h.Get(job.id).reason ==
        "needs workers that speak executor protocol 6 (bf16); 1 of 1 nodes speak only 5: "
        "upgrade them");

  h.AddNode("a", 2);  // this build's whole range
  h.scheduler.Tick();
  const JobRecord running = h.Get(job.id);
  REQUIRE(running.state == JobState::kRunning);
  CHECK(running.precision == Precision::kBf16);
  bool planned_at_bf16 = false;
  for (const StateChange& change : running.history) {
    planned_at_bf16 |= change.reason == "planning on 2 cpu devices at bf16";
  }
  CHECK(planned_at_bf16);
  const Sent sent = OnlyTrain(h, "node-a");
  CHECK(sent.run_spec["version"] == protocol::kPrecisionProtocolVersion);
  CHECK(sent.run_spec["precision"] == "bf16");
  // The CPU preset at bf16 timed it (its default is fp32, so the source names the precision).
  CHECK(nlohmann::json::parse(running.plan_json.str())["profile_source"] ==
        "analytical:cpu (bf16)");
}

TEST_CASE("a default job trains at bf16 on GPUs with bf16 math and fp32 on CPUs and old workers",
          "[scheduler][precision]") {
  InProcessPlanningBackend backend;
  struct Case {
    const char* type;
    protocol::ProtocolRange protocol;
    Precision expected;
    const char* profile_source;
  };
  for (const Case& c : {Case{"a100", {}, Precision::kBf16, "analytical:a100 (bf16)"},
                        Case{"h100", {}, Precision::kBf16, "analytical:h100 (bf16)"},
                        // Workers before protocol 6 get fp32 run specs, planned as before.
                        Case{"a100", {1, 5}, Precision::kFp32, "analytical:a100"},
                        Case{"cpu", {}, Precision::kFp32, "analytical:cpu"},
                        Case{"v100", {}, Precision::kFp32, "analytical:v100"}}) {
    INFO(c.type << " protocol " << c.protocol.newest);
    Harness h(nullptr, &backend);
    h.AddNode("a", 2, c.type, {}, c.protocol);
    JobRecord job = h.Submit(SmallCnn(2));
    h.scheduler.Tick();
    const JobRecord running = h.Get(job.id);
    REQUIRE(running.state == JobState::kRunning);
    CHECK(running.precision == c.expected);
    const Sent sent = OnlyTrain(h, "node-a");
    if (c.expected == Precision::kFp32) {
      CHECK_FALSE(sent.run_spec.contains("precision"));
      CHECK(sent.run_spec["version"] == 1);
    } else {
      CHECK(sent.run_spec["precision"] == planner::PrecisionName(c.expected));
      CHECK(sent.run_spec["version"] == protocol::kPrecisionProtocolVersion);
    }
    CHECK(nlohmann::json::parse(running.plan_json.str())["profile_source"] == c.profile_source);
  }
}

TEST_CASE("a 16-bit job is planned with a profile recorded at its precision, else analytically",
          "[scheduler][precision][profile]") {
  InProcessPlanningBackend backend;
  Harness h(nullptr, &backend);
  // Workers before protocol 8 profile fp32 only (on newer ones a 16-bit job is profiled at its
  // precision: scheduler_profile_precision_test).
  h.AddNode("a", 2, "cpu", {}, protocol::ProtocolRange{1, 7});
  JobSpec measured = SmallCnn(2);
  measured.profile = "measured";
  measured.precision = Precision::kBf16;
  // No profile cached: a PROFILE task would measure fp32, so none is sent.
  JobRecord first = h.Submit(measured);
  h.scheduler.Tick();
  REQUIRE(h.Get(first.id).state == JobState::kRunning);
  CHECK(nlohmann::json::parse(h.Get(first.id).plan_json.str())["profile_source"] ==
        "analytical:cpu (bf16)");
  h.Exit("node-a", h.Get(first.id).task_ids[0], v1::TASK_OUTCOME_SUCCEEDED);
  h.Commands("node-a");

  // A cached fp32 profile is passed over for the analytical model at bf16 ...
  const std::string key = backend.ModelKey(measured);
  REQUIRE(ProfileCacheKey(backend, measured, Precision::kBf16) == key + "/precision=bf16");
  const std::string fp32_profile =
      R"({"format":"deepool.profile","version":1,"device":"cpu","model":"small_cnn","layers":[]})";
  REQUIRE(h.store->SaveProfile(key, "cpu", fp32_profile).ok());
  JobRecord second = h.Submit(measured);
  h.scheduler.Tick();
  REQUIRE(h.Get(second.id).state == JobState::kRunning);
  CHECK(nlohmann::json::parse(h.Get(second.id).plan_json.str())["profile_source"] ==
        "analytical:cpu (bf16)");
  h.Exit("node-a", h.Get(second.id).task_ids[0], v1::TASK_OUTCOME_SUCCEEDED);
  h.Commands("node-a");

  // ... and one recorded at bf16 is used.
  const std::string bf16_profile =
      R"({"format":"deepool.profile","version":1,"device":"cpu","model":"small_cnn",)"
      R"("precision":"bf16","layers":[]})";
  REQUIRE(h.store->SaveProfile(key + "/precision=bf16", "cpu", bf16_profile).ok());
  JobRecord third = h.Submit(measured);
  h.scheduler.Tick();
  REQUIRE(h.Get(third.id).state == JobState::kRunning);
  // (Its layers are empty, so the analytical model at bf16 times them all.)
  CHECK(nlohmann::json::parse(h.Get(third.id).plan_json.str())["profile_source"] ==
        "profile:cpu/small_cnn (bf16) + analytical:cpu (bf16) for 16 layers");
}

TEST_CASE("a device type without the job's precision fails its planning naming both",
          "[scheduler][precision]") {
  InProcessPlanningBackend backend;
  JobSpec bf16 = SmallCnn(1);
  bf16.precision = Precision::kBf16;
  StatusOr<PlannedJob> planned = backend.PlanForeground(bf16, ClusterShape{"v100", 1, 1, 1}, "");
  REQUIRE_FALSE(planned.ok());
  CHECK(planned.status().code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(planned.status().message(),
             Catch::StartsWith("no profile at bf16 for device type v100: device preset \"v100\" "
                               "has no bf16 math"));
}

TEST_CASE("a job's precision survives a coordinator restart", "[scheduler][precision]") {
  InMemoryJobStore store;
  InProcessPlanningBackend backend;
  std::string id;
  {
    Harness h(&store, &backend);
    h.AddNode("a", 2);
    JobSpec bf16 = SmallCnn(2);
    bf16.precision = Precision::kBf16;
    id = h.Submit(bf16).id;
    h.scheduler.Tick();
    REQUIRE(h.Get(id).state == JobState::kRunning);
  }
  // The restarted coordinator sends the task again (its worker never reported the store), with
  // the run spec rebuilt from the stored record.
  Harness h(&store, &backend);
  REQUIRE(h.Get(id).precision == Precision::kBf16);
  h.AddNode("a", 2);
  h.scheduler.Tick();
  const Sent sent = OnlyTrain(h, "node-a");
  CHECK(sent.run_spec["precision"] == "bf16");
}

TEST_CASE("a BG job inside a FG executor trains at its own precision", "[scheduler][precision]") {
  Harness h;  // the fake backend: placement only
  h.AddNode("a", 2);
  JobRecord fg = h.Submit(Fg(2));
  h.scheduler.Tick();
  h.Commands("node-a");
  h.ReportRanks("node-a", fg.id, {1});
  JobSpec bf16 = Bg();
  bf16.precision = Precision::kBf16;
  JobRecord bg = h.Submit(bf16);
  h.scheduler.Tick();
  REQUIRE(h.Get(bg.id).state == JobState::kRunning);
  CHECK(h.Get(bg.id).precision == Precision::kBf16);
  std::vector<v1::TaskCommand> commands = h.Commands("node-a");
  REQUIRE(commands.size() == 1);
  const v1::TrainTask& train = commands[0].assign().train();
  REQUIRE(train.background());
  CHECK(nlohmann::json::parse(train.background_json())["precision"] == "bf16");
  // Its host's run spec says nothing of it: the FG job is a default one on CPUs, fp32.
  CHECK(h.Get(fg.id).precision == Precision::kFp32);
}

}  // namespace
}  // namespace deepool::coordinator::testing
