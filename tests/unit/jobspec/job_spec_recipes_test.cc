// The job spec's training recipes (optimizer.decay_1d, schedule, clip_grad_norm): read, kept
// through JSON and the API message, copied into the run spec's optimizer, needing executor
// protocol 7 when set, and refused by name when wrong.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "jobspec/job_spec.h"
#include "jobspec/job_spec_json.h"
#include "jobspec/job_spec_proto.h"
#include "protocol/version.h"

namespace deepool::jobspec {
namespace {

constexpr const char* kMinimal =
    R"({"name":"demo","model":"resnet50","global_batch":32,"iterations":10,)";

StatusOr<JobSpec> WithOptimizer(const std::string& optimizer, const std::string& role = "fg") {
  return ParseJobSpecJson(std::string(kMinimal) + R"("role":")" + role + R"(","optimizer":)" +
                          optimizer + "}");
}

std::string ErrorOf(const std::string& optimizer, const std::string& role = "fg") {
  StatusOr<JobSpec> spec = WithOptimizer(optimizer, role);
  REQUIRE_FALSE(spec.ok());
  CHECK(spec.status().code() == StatusCode::kInvalidArgument);
  return spec.status().message();
}

TEST_CASE("a job's training recipes are kept and reach the run spec at protocol 7",
          "[job_spec][recipes]") {
  StatusOr<JobSpec> spec =
      WithOptimizer(R"({"name":"adamw","lr":0.001,"decay_1d":false,"clip_grad_norm":1.0,)"
                    R"("schedule":{"kind":"cosine","warmup_iterations":2,"min_lr":0.0001}})");
  INFO(spec.status().ToString());
  REQUIRE(spec.ok());
  CHECK_FALSE(spec->optimizer.decay_1d);
  CHECK(spec->optimizer.clip_grad_norm == 1.0);
  CHECK(spec->optimizer.schedule == protocol::LrScheduleSpec{"cosine", 2, 0.0001});
  CHECK(RequiredProtocolVersion(*spec) == protocol::kRecipesProtocolVersion);
  const protocol::OptimizerSpec run = RunSpecOptimizer(spec->optimizer);
  CHECK_FALSE(run.decay_1d);
  CHECK(run.clip_grad_norm == 1.0);
  CHECK(run.schedule == spec->optimizer.schedule);
  const nlohmann::json written = JobSpecToJson(*spec);
  CHECK(written["optimizer"]["schedule"]["kind"] == "cosine");
  for (const StatusOr<JobSpec>& copy :
       {JobSpecFromProto(JobSpecToProto(*spec)), JobSpecFromJson(written)}) {
    INFO(copy.status().ToString());
    REQUIRE(copy.ok());
    CHECK(RunSpecOptimizer(copy->optimizer) == run);
    CHECK(JobSpecToJson(*copy) == written);
  }
  // Without recipes nothing is written and the version is the optimizer's.
  StatusOr<JobSpec> plain = WithOptimizer(R"({"name":"adamw"})");
  REQUIRE(plain.ok());
  for (const char* field : {"decay_1d", "clip_grad_norm", "schedule"}) {
    CHECK_FALSE(JobSpecToJson(*plain)["optimizer"].contains(field));
  }
  CHECK(RequiredProtocolVersion(*plain) == protocol::kAdamWProtocolVersion);
  CHECK(SpecFingerprint(*plain) != SpecFingerprint(*spec));
}

TEST_CASE("bad training recipes are refused naming the field", "[job_spec][recipes]") {
  CHECK(ErrorOf(R"({"schedule":{"kind":"step"}})") ==
        "optimizer.schedule.kind: must be \"constant\", \"cosine\" or \"linear\", got \"step\"");
  CHECK(ErrorOf(R"({"schedule":{"kind":"cosine","warmup_iterations":-1}})") ==
        "optimizer.schedule.warmup_iterations: must be >= 0");
  CHECK(ErrorOf(R"({"lr":0.1,"schedule":{"kind":"cosine","min_lr":0.2}})") ==
        "optimizer.schedule.min_lr: must be in [0, optimizer.lr]");
  CHECK(ErrorOf(R"({"clip_grad_norm":-1})") ==
        "optimizer.clip_grad_norm: must be >= 0 (0: no clipping)");
  CHECK_THAT(ErrorOf(R"({"schedule":{"kind":"cosine","warm":3}})"),
             Catch::Contains("optimizer.schedule.warm"));
  CHECK(ErrorOf(R"({"clip_grad_norm":1})", "bg") ==
        "optimizer: schedule and clip_grad_norm are for foreground jobs only");
  // decay_1d is the optimizer's own, and BG jobs take it.
  CHECK(WithOptimizer(R"({"decay_1d":false})", "bg").ok());
}

}  // namespace
}  // namespace deepool::jobspec
