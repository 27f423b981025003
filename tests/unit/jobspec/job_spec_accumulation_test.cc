// The job spec's "accumulation_steps" and "gradient_precision": read, kept through JSON and the
// API message, refused out of range, when N does not divide the global batch, for BG jobs and
// at a gradient precision other than fp32 or bf16; each alone needs executor protocol 8.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "jobspec/job_spec.h"
#include "jobspec/job_spec_json.h"
#include "jobspec/job_spec_proto.h"
#include "protocol/version.h"
#include "tests/unit/jobspec/job_spec_test_util.h"

namespace deepool::jobspec {
namespace {

using planner::Precision;

TEST_CASE("accumulation steps and gradient precision are read kept and need protocol 8",
          "[job_spec][accumulation]") {
  StatusOr<JobSpec> spec =
      ParseMinimalWith(R"(,"accumulation_steps":4,"gradient_precision":"bf16")");
  REQUIRE(spec.ok());
  CHECK(spec->accumulation_steps == 4);
  CHECK(spec->gradient_precision == Precision::kBf16);
  CHECK(PassBatch(*spec) == 8);
  CHECK(RequiredProtocolVersion(*spec) == protocol::kAccumulationProtocolVersion);
  const nlohmann::json written = JobSpecToJson(*spec);
  CHECK(written["accumulation_steps"] == 4);
  CHECK(written["gradient_precision"] == "bf16");
  const v1::JobSpec message = JobSpecToProto(*spec);
  CHECK(message.accumulation_steps() == 4);
  CHECK(message.gradient_precision() == "bf16");
  for (const StatusOr<JobSpec>& copy : {JobSpecFromProto(message), JobSpecFromJson(written)}) {
    REQUIRE(copy.ok());
    CHECK(copy->accumulation_steps == 4);
    CHECK(copy->gradient_precision == Precision::kBf16);
    CHECK(JobSpecToJson(*copy) == written);
  }

  // Each alone needs protocol 8; neither, nothing new.
  StatusOr<JobSpec> steps = ParseMinimalWith(R"(,"accumulation_steps":2)");
  REQUIRE(steps.ok());
  CHECK(steps->gradient_precision == Precision::kFp32);
  CHECK(RequiredProtocolVersion(*steps) == protocol::kAccumulationProtocolVersion);
  StatusOr<JobSpec> narrow = ParseMinimalWith(R"(,"gradient_precision":"bf16")");
  REQUIRE(narrow.ok());
  CHECK(narrow->accumulation_steps == 1);
  CHECK(RequiredProtocolVersion(*narrow) == protocol::kAccumulationProtocolVersion);
  StatusOr<JobSpec> plain = ParseMinimalWith("");
  REQUIRE(plain.ok());
  CHECK(plain->accumulation_steps == 1);
  CHECK(plain->gradient_precision == Precision::kFp32);
  CHECK(PassBatch(*plain) == 32);
  CHECK(RequiredProtocolVersion(*plain) == 1);
  CHECK_FALSE(JobSpecToJson(*plain).contains("accumulation_steps"));
  CHECK_FALSE(JobSpecToJson(*plain).contains("gradient_precision"));
  CHECK_FALSE(JobSpecToProto(*plain).has_accumulation_steps());
  CHECK(SpecFingerprint(*plain) != SpecFingerprint(*steps));
  CHECK(SpecFingerprint(*plain) != SpecFingerprint(*narrow));
  // fp32 and 1 said out loud are the defaults.
  StatusOr<JobSpec> said =
      ParseMinimalWith(R"(,"accumulation_steps":1,"gradient_precision":"fp32")");
  REQUIRE(said.ok());
  CHECK(RequiredProtocolVersion(*said) == 1);
}

TEST_CASE("accumulation steps and gradient precision are refused naming the field",
          "[job_spec][accumulation]") {
  CHECK(RefusalOf(R"(,"accumulation_steps":0)") == "accumulation_steps: must be in [1, 4096]");
  CHECK(RefusalOf(R"(,"accumulation_steps":4097)") == "accumulation_steps: must be in [1, 4096]");
  CHECK(RefusalOf(R"(,"accumulation_steps":3)") ==
        "accumulation_steps: 3 does not divide global_batch 32 (global_batch counts an "
        "iteration's samples, each pass takes global_batch / accumulation_steps)");
  // Two devices need two samples per pass.
  CHECK(RefusalOf(R"(,"gpus":2,"accumulation_steps":32)") ==
        "gpus: must be <= global_batch / accumulation_steps (1, one pass's samples)");
  CHECK(RefusalOf(R"(,"gradient_precision":"fp16")") ==
        "gradient_precision: must be \"fp32\" or \"bf16\", got \"fp16\"");
  CHECK(RefusalOf(R"(,"gradient_precision":"fp8")") ==
        "gradient_precision: unknown precision \"fp8\" (known: fp32, tf32, bf16, fp16)");
  CHECK(RefusalOf(R"(,"accumulation_steps":"4")") == "field accumulation_steps must be an integer");
  CHECK(RefusalOf(R"(,"role":"bg","accumulation_steps":2)") ==
        "accumulation_steps: is for foreground jobs (a bg job trains one pass per iteration)");
  CHECK(RefusalOf(R"(,"role":"bg","gradient_precision":"bf16")") ==
        "gradient_precision: is for foreground jobs (a bg job runs on one device and "
        "all-reduces nothing)");
  CHECK(RefusalOf(R"(,"role":"bg")") == "accepted");
}

}  // namespace
}  // namespace deepool::jobspec
