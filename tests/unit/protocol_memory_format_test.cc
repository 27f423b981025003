// The memory format in the executor protocol (protocol/run_spec.h) and its resolution
// (planner/memory_format.h): "memory_format" round-trips through the run spec, is written only
// when not auto (so an old executor reads an auto spec), needs executor protocol 9, and is
// refused by name when unknown or in an older document; auto resolves to channels_last only on
// CUDA for a convolutional model at 16 bits.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "planner/memory_format.h"
#include "planner/zoo/zoo.h"
#include "protocol/run_spec.h"
#include "protocol/version.h"
#include "tests/unit/run_spec_test_util.h"

namespace deepool::protocol {
namespace {

using nlohmann::json;
using planner::MemoryFormat;

RunSpec Spec() { return MinimalRunSpec("small_cnn"); }

TEST_CASE("run spec: channels_last and contiguous round-trip at version 9",
          "[protocol][version][memory_format]") {
  for (MemoryFormat format : {MemoryFormat::kChannelsLast, MemoryFormat::kContiguous}) {
    RunSpec spec = Spec();
    spec.memory_format = format;
    CHECK(RequiredProtocolVersion(spec) == kMemoryFormatProtocolVersion);
    json doc = json::parse(RunSpecToJson(spec));
    CHECK(doc["version"] == kMemoryFormatProtocolVersion);
    CHECK(doc["memory_format"] == planner::MemoryFormatName(format));
    StatusOr<RunSpec> parsed = ParseRunSpecJson(doc.dump());
    INFO(parsed.status().ToString());
    REQUIRE(parsed.ok());
    CHECK(parsed->memory_format == format);
  }
}

TEST_CASE("run spec: auto is written as no field and needs no newer version",
          "[protocol][version][memory_format]") {
  json doc = json::parse(RunSpecToJson(Spec()));
  CHECK(doc["version"] == kOldestProtocolVersion);
  CHECK_FALSE(doc.contains("memory_format"));
  StatusOr<RunSpec> parsed = ParseRunSpecJson(doc.dump());
  REQUIRE(parsed.ok());
  CHECK(parsed->memory_format == MemoryFormat::kAuto);
}

TEST_CASE("run spec: a version 8 document with a memory format is refused naming it",
          "[protocol][version][memory_format]") {
  RunSpec spec = Spec();
  spec.memory_format = MemoryFormat::kChannelsLast;
  json doc = json::parse(RunSpecToJson(spec));
  doc["version"] = 8;
  CHECK(RunSpecRefusal(doc) ==
        "memory_format \"channels_last\" needs executor protocol version 9; this run spec is "
        "version 8");
}

TEST_CASE("run spec: an unknown memory format is refused naming the field",
          "[protocol][memory_format]") {
  json doc = json::parse(RunSpecToJson(Spec()));
  doc["version"] = kMemoryFormatProtocolVersion;
  doc["memory_format"] = "nhwc";
  CHECK(RunSpecRefusal(doc) ==
        "memory_format: unknown memory format \"nhwc\" (auto, contiguous or channels_last)");
  doc["memory_format"] = 1;
  CHECK_THAT(RunSpecRefusal(doc), Catch::Contains("memory_format"));
}

TEST_CASE("auto memory format: channels_last only on cuda for convolutions at 16 bits",
          "[planner][memory_format]") {
  const planner::Graph cnn = ZooModel("small_cnn");
  const planner::Graph mlp = ZooModel("mlp");
  using planner::Precision;
  using planner::ResolveMemoryFormat;
  CHECK(ResolveMemoryFormat(MemoryFormat::kAuto, true, Precision::kBf16, cnn) ==
        MemoryFormat::kChannelsLast);
  CHECK(ResolveMemoryFormat(MemoryFormat::kAuto, true, Precision::kFp16, cnn) ==
        MemoryFormat::kChannelsLast);
  CHECK(ResolveMemoryFormat(MemoryFormat::kAuto, true, Precision::kFp32, cnn) ==
        MemoryFormat::kContiguous);
  CHECK(ResolveMemoryFormat(MemoryFormat::kAuto, true, Precision::kTf32, cnn) ==
        MemoryFormat::kContiguous);
  CHECK(ResolveMemoryFormat(MemoryFormat::kAuto, false, Precision::kBf16, cnn) ==
        MemoryFormat::kContiguous);
  CHECK(ResolveMemoryFormat(MemoryFormat::kAuto, true, Precision::kBf16, mlp) ==
        MemoryFormat::kContiguous);
  // An explicit choice wins everywhere.
  CHECK(ResolveMemoryFormat(MemoryFormat::kChannelsLast, false, Precision::kFp32, mlp) ==
        MemoryFormat::kChannelsLast);
  CHECK(ResolveMemoryFormat(MemoryFormat::kContiguous, true, Precision::kBf16, cnn) ==
        MemoryFormat::kContiguous);
}

}  // namespace
}  // namespace deepool::protocol
