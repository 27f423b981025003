// The coordinator's job record (coordinator/job.h): its stored JSON, and the checks of what a
// client sets beside a spec (reasons, request ids). The spec itself: tests/unit/jobspec/.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "coordinator/job.h"
#include "jobspec/job_spec_json.h"

namespace deepool::coordinator {
namespace {

TEST_CASE("a job record round-trips through its stored JSON", "[job_record]") {
  JobRecord job;
  job.id = "job-000042";
  job.seq = 42;
  job.spec = *jobspec::ParseJobSpecJson(
      R"({"name":"demo","model":"resnet50","global_batch":32,"iterations":10})");
  job.state = JobState::kRunning;
  job.reason = "dispatched";
  job.reason_code = ReasonCode::kProgress;
  job.attempt = 2;
  job.history = {{JobState::kPending, "waiting", 1, ReasonCode::kQueuedBehind},
                 {JobState::kRunning, "dispatched", 2, ReasonCode::kProgress}};
  job.progress.iteration = 3;
  job.progress.loss = 1.5;
  job.devices = {{0, "node-a", "a", "cpu:0"}, {1, "node-b", "b", "cpu:1"}};
  job.task_ids = {"job-000042.a2.node-a"};
  job.plan_json = "{}";
  StatusOr<JobRecord> back = JobRecordFromJson(JobRecordToJson(job));
  REQUIRE(back.ok());
  CHECK(JobRecordToJson(*back) == JobRecordToJson(job));
  CHECK(back->progress.loss == 1.5);
  CHECK(back->devices[1].node_id == "node-b");
  CHECK(back->reason_code == ReasonCode::kProgress);
  CHECK(back->history[0].code == ReasonCode::kQueuedBehind);

  // Records stored before reason codes read back without one.
  nlohmann::json old = JobRecordToJson(job);
  old.erase("reason_code");
  for (nlohmann::json& change : old["history"]) change.erase("code");
  StatusOr<JobRecord> legacy = JobRecordFromJson(old);
  REQUIRE(legacy.ok());
  CHECK(legacy->reason_code == ReasonCode::kUnspecified);
  CHECK(legacy->history[1].code == ReasonCode::kUnspecified);
}

TEST_CASE("a client's reason and request id are bounded printable UTF-8", "[job_record]") {
  CHECK(CheckReason("done").ok());
  CHECK(CheckReason("a\rb").message() == "reason: has control characters");
  CHECK_FALSE(CheckReason(std::string(2000, 'r')).ok());
  CHECK(CheckReason("stop\xfe").message() == "reason: is not valid UTF-8");
  CHECK(CheckRequestId("req-1").ok());
  CHECK(CheckRequestId("req 1").message() == "request_id: has spaces or control characters");
  CHECK(CheckRequestId("req\x80").message() == "request_id: is not valid UTF-8");
}

}  // namespace
}  // namespace deepool::coordinator
