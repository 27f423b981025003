// The job spec's "memory_format": read, kept through JSON and the API message, refused by name
// when unknown or on a BG job; contiguous and channels_last need executor protocol 9, auto (the
// default) nothing newer.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "jobspec/job_spec.h"
#include "jobspec/job_spec_json.h"
#include "jobspec/job_spec_proto.h"
#include "protocol/version.h"
#include "tests/unit/jobspec/job_spec_test_util.h"

namespace deepool::jobspec {
namespace {

using planner::MemoryFormat;

TEST_CASE("memory format is read kept and needs protocol 9", "[job_spec][memory_format]") {
  for (MemoryFormat format : {MemoryFormat::kChannelsLast, MemoryFormat::kContiguous}) {
    const std::string name = planner::MemoryFormatName(format);
    StatusOr<JobSpec> spec = ParseMinimalWith(R"(,"memory_format":")" + name + "\"");
    REQUIRE(spec.ok());
    CHECK(spec->memory_format == format);
    CHECK(RequiredProtocolVersion(*spec) == protocol::kMemoryFormatProtocolVersion);
    const nlohmann::json written = JobSpecToJson(*spec);
    CHECK(written["memory_format"] == name);
    const v1::JobSpec message = JobSpecToProto(*spec);
    CHECK(message.memory_format() == name);
    for (const StatusOr<JobSpec>& copy : {JobSpecFromProto(message), JobSpecFromJson(written)}) {
      REQUIRE(copy.ok());
      CHECK(copy->memory_format == format);
    }
  }
}

TEST_CASE("auto memory format is the default and is written as no field",
          "[job_spec][memory_format]") {
  for (const std::string& fields : {std::string(), std::string(R"(,"memory_format":"auto")")}) {
    StatusOr<JobSpec> spec = ParseMinimalWith(fields);
    REQUIRE(spec.ok());
    CHECK(spec->memory_format == MemoryFormat::kAuto);
    CHECK(RequiredProtocolVersion(*spec) < protocol::kMemoryFormatProtocolVersion);
    CHECK_FALSE(JobSpecToJson(*spec).contains("memory_format"));
    CHECK(JobSpecToProto(*spec).memory_format().empty());
  }
}

TEST_CASE("bad memory formats are refused naming the field", "[job_spec][memory_format]") {
  CHECK(RefusalOf(R"(,"memory_format":"nhwc")") ==
        "memory_format: unknown memory format \"nhwc\" (auto, contiguous or channels_last)");
  CHECK_THAT(RefusalOf(R"(,"memory_format":4)"), Catch::Contains("memory_format"));
  CHECK(RefusalOf(R"(,"role":"bg","memory_format":"channels_last")") ==
        "memory_format: is for foreground jobs (a bg job trains contiguous)");
  CHECK(RefusalOf(R"(,"role":"bg","memory_format":"auto")") == "accepted");
}

}  // namespace
}  // namespace deepool::jobspec
