// Gradient accumulation and the gradient all-reduces' width in the executor protocol
// (protocol/run_spec.h): "accumulation_steps" and "gradient_precision" round-trip through the run
// spec, are written only when set (so an old executor reads a spec without them), need executor
// protocol 8, and are refused by name when wrong.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "planner/zoo/zoo.h"
#include "protocol/run_spec.h"
#include "protocol/version.h"
#include "tests/unit/run_spec_test_util.h"

namespace deepool::protocol {
namespace {

using nlohmann::json;

RunSpec Spec() { return MinimalRunSpec("mlp"); }

TEST_CASE("run spec: accumulation steps and bf16 gradient sums round-trip at version 8",
          "[protocol][version][accumulation]") {
  RunSpec spec = Spec();
  spec.accumulation_steps = 4;
  spec.gradient_precision = planner::Precision::kBf16;
  CHECK(spec.IterationBatch() == 32);  // 4 passes of the plan's 8 samples
  json doc = json::parse(RunSpecToJson(spec));
  CHECK(doc["version"] == kAccumulationProtocolVersion);
  CHECK(doc["accumulation_steps"] == 4);
  CHECK(doc["gradient_precision"] == "bf16");
  StatusOr<RunSpec> parsed = ParseRunSpecJson(doc.dump());
  INFO(parsed.status().ToString());
  REQUIRE(parsed.ok());
  CHECK(parsed->accumulation_steps == 4);
  CHECK(parsed->gradient_precision == planner::Precision::kBf16);
  CHECK(parsed->plan.global_batch == 8);
}

TEST_CASE("run spec: each of the two alone needs version 8 and neither is written by default",
          "[protocol][version][accumulation]") {
  json plain = json::parse(RunSpecToJson(Spec()));
  CHECK(plain["version"] == kOldestProtocolVersion);
  CHECK_FALSE(plain.contains("accumulation_steps"));
  CHECK_FALSE(plain.contains("gradient_precision"));
  StatusOr<RunSpec> parsed = ParseRunSpecJson(plain.dump());
  REQUIRE(parsed.ok());
  CHECK(parsed->accumulation_steps == 1);
  CHECK(parsed->gradient_precision == planner::Precision::kFp32);
  RunSpec accumulating = Spec();
  accumulating.accumulation_steps = 2;
  CHECK(RequiredProtocolVersion(accumulating) == 8);
  RunSpec narrow = Spec();
  narrow.gradient_precision = planner::Precision::kBf16;
  CHECK(RequiredProtocolVersion(narrow) == 8);
}

TEST_CASE("run spec: a version 7 document that accumulates or sums in bf16 is refused, naming it",
          "[protocol][version][accumulation]") {
  RunSpec spec = Spec();
  spec.accumulation_steps = 3;
  json doc = json::parse(RunSpecToJson(spec));
  doc["version"] = 7;
  CHECK(RunSpecRefusal(doc) ==
        "accumulation_steps needs executor protocol version 8; this run spec is version 7");
  spec = Spec();
  spec.gradient_precision = planner::Precision::kBf16;
  doc = json::parse(RunSpecToJson(spec));
  doc["version"] = 7;
  CHECK(RunSpecRefusal(doc) ==
        "gradient_precision \"bf16\" needs executor protocol version 8; this run spec is version "
        "7");
}

TEST_CASE("run spec: bad accumulation steps and gradient precisions are refused by name",
          "[protocol][accumulation]") {
  json doc = json::parse(RunSpecToJson(Spec()));
  doc["version"] = kAccumulationProtocolVersion;
  SECTION("zero steps") {
    doc["accumulation_steps"] = 0;
    CHECK(RunSpecRefusal(doc) == "accumulation_steps must be in [1, 4096]");
  }
  SECTION("too many steps") {
    doc["accumulation_steps"] = 5000;
    CHECK(RunSpecRefusal(doc) == "accumulation_steps must be in [1, 4096]");
  }
  SECTION("steps not a number") {
    doc["accumulation_steps"] = "four";
    CHECK_THAT(RunSpecRefusal(doc), Catch::Contains("accumulation_steps"));
  }
  SECTION("fp16 sums") {
    doc["gradient_precision"] = "fp16";
    CHECK(RunSpecRefusal(doc) == "gradient_precision must be fp32 or bf16, not fp16");
  }
  SECTION("unknown precision") {
    doc["gradient_precision"] = "fp8";
    CHECK_THAT(RunSpecRefusal(doc), Catch::StartsWith("gradient_precision: "));
  }
}

}  // namespace
}  // namespace deepool::protocol
