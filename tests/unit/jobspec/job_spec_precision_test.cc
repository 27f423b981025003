// The job spec's "precision": read, kept through JSON and the API message, refused when unknown,
// needing executor protocol 6 unless fp32, and the default the coordinator resolves per device
// type (jobspec::TrainingPrecision).
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

TEST_CASE("a job's precision is read kept and needs executor protocol 6 unless fp32",
          "[job_spec][precision]") {
  for (Precision precision : planner::AllPrecisions()) {
    const std::string name = planner::PrecisionName(precision);
    INFO(name);
    StatusOr<JobSpec> spec = ParseMinimalWith(R"(,"precision":")" + name + "\"");
    REQUIRE(spec.ok());
    REQUIRE(spec->precision == precision);
    CHECK(RequiredProtocolVersion(*spec) ==
          (precision == Precision::kFp32 ? 1 : protocol::kPrecisionProtocolVersion));
    const nlohmann::json written = JobSpecToJson(*spec);
    CHECK(written["precision"] == name);
    CHECK(JobSpecToProto(*spec).precision() == name);
    for (const StatusOr<JobSpec>& copy :
         {JobSpecFromProto(JobSpecToProto(*spec)), JobSpecFromJson(written)}) {
      REQUIRE(copy.ok());
      CHECK(copy->precision == precision);
      CHECK(JobSpecToJson(*copy) == written);
    }
  }
  StatusOr<JobSpec> plain = ParseMinimalWith("");
  REQUIRE(plain.ok());
  CHECK_FALSE(plain->precision.has_value());
  CHECK_FALSE(JobSpecToJson(*plain).contains("precision"));
  CHECK(JobSpecToProto(*plain).precision().empty());
  CHECK(RequiredProtocolVersion(*plain) == 1);
  StatusOr<JobSpec> bf16 = ParseMinimalWith(R"(,"precision":"bf16")");
  REQUIRE(bf16.ok());
  CHECK(SpecFingerprint(*plain) != SpecFingerprint(*bf16));

  StatusOr<JobSpec> unknown = ParseMinimalWith(R"(,"precision":"fp8")");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().code() == StatusCode::kInvalidArgument);
  CHECK(unknown.status().message() ==
        "precision: unknown precision \"fp8\" (known: fp32, tf32, bf16, fp16)");
  // The BG trainer has no loss scaler.
  StatusOr<JobSpec> bg_fp16 = ParseMinimalWith(R"(,"role":"bg","precision":"fp16")");
  REQUIRE_FALSE(bg_fp16.ok());
  CHECK(bg_fp16.status().message() ==
        "precision: fp16 needs loss scaling, which BG jobs lack: use bf16");
  CHECK(ParseMinimalWith(R"(,"role":"bg","precision":"bf16")").ok());
  StatusOr<JobSpec> number = ParseMinimalWith(R"(,"precision":16)");
  REQUIRE_FALSE(number.ok());
  CHECK(number.status().message() == "field precision must be a string");
}

TEST_CASE("a default precision is bf16 on devices with bf16 math and fp32 on CPUs",
          "[job_spec][precision]") {
  JobSpec spec;
  for (const char* gpu : {"a100", "h100", "h200"}) {
    INFO(gpu);
    CHECK(TrainingPrecision(spec, gpu, true) == Precision::kBf16);
    // Workers before protocol 6 cannot read a precision: they train fp32 jobs.
    CHECK(TrainingPrecision(spec, gpu, false) == Precision::kFp32);
  }
  CHECK(TrainingPrecision(spec, "cpu", true) == Precision::kFp32);     // the cpu preset has bf16
  CHECK(TrainingPrecision(spec, "v100", true) == Precision::kFp32);    // no bf16 math
  CHECK(TrainingPrecision(spec, "tpu-v9", true) == Precision::kFp32);  // no preset
  // Asked for, a precision is the job's wherever it goes.
  spec.precision = Precision::kBf16;
  CHECK(TrainingPrecision(spec, "cpu", true) == Precision::kBf16);
  spec.precision = Precision::kFp32;
  CHECK(TrainingPrecision(spec, "h100", true) == Precision::kFp32);
}

}  // namespace
}  // namespace deepool::jobspec
