// The optimizer's training recipes in the executor protocol (protocol/training_spec.h):
// decay_1d, schedule and clip_grad_norm round-trip through the run spec, are written only when
// set (so an old executor reads a spec without them), need executor protocol 7, and are refused
// by name when wrong.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "planner/zoo/zoo.h"
#include "protocol/run_spec.h"
#include "protocol/version.h"
#include "tests/unit/run_spec_test_util.h"

namespace deepool::protocol {
namespace {

using nlohmann::json;

RunSpec Spec() {
  RunSpec spec = MinimalRunSpec("mlp");
  spec.optimizer.name = "adamw";
  spec.optimizer.lr = 0.003;
  return spec;
}

OptimizerSpec WithRecipes() {
  OptimizerSpec spec = Spec().optimizer;
  spec.decay_1d = false;
  spec.clip_grad_norm = 1.0;
  spec.schedule = LrScheduleSpec{"cosine", 100, 1e-5};
  return spec;
}

TEST_CASE("run spec: training recipes round-trip at version 7", "[protocol][version][recipes]") {
  RunSpec spec = Spec();
  spec.optimizer = WithRecipes();
  json doc = json::parse(RunSpecToJson(spec));
  CHECK(doc["version"] == kRecipesProtocolVersion);
  CHECK(doc["optimizer"]["decay_1d"] == false);
  CHECK(doc["optimizer"]["clip_grad_norm"] == 1.0);
  CHECK(doc["optimizer"]["schedule"] ==
        json{{"kind", "cosine"}, {"warmup_iterations", 100}, {"min_lr", 1e-5}});
  StatusOr<RunSpec> parsed = ParseRunSpecJson(doc.dump());
  INFO(parsed.status().ToString());
  REQUIRE(parsed.ok());
  CHECK(parsed->optimizer == spec.optimizer);
}

TEST_CASE("run spec: without recipes nothing new is written and the version stays",
          "[protocol][version][recipes]") {
  json doc = json::parse(RunSpecToJson(Spec()));
  CHECK(doc["version"] == kAdamWProtocolVersion);
  for (const char* field : {"decay_1d", "clip_grad_norm", "schedule"}) {
    CHECK_FALSE(doc["optimizer"].contains(field));
  }
  // Each recipe alone needs version 7.
  OptimizerSpec decay = Spec().optimizer;
  decay.decay_1d = false;
  OptimizerSpec clip = Spec().optimizer;
  clip.clip_grad_norm = 0.5;
  OptimizerSpec warmup = Spec().optimizer;
  warmup.schedule.warmup_iterations = 10;
  for (const OptimizerSpec& optimizer : {decay, clip, warmup}) {
    CHECK(OptimizerProtocolVersion(optimizer) == kRecipesProtocolVersion);
  }
}

TEST_CASE("run spec: a version 6 document with a recipe is refused, naming it",
          "[protocol][version][recipes]") {
  RunSpec spec = Spec();
  spec.optimizer = WithRecipes();
  json doc = json::parse(RunSpecToJson(spec));
  doc["version"] = 6;
  CHECK(RunSpecRefusal(doc) ==
        "optimizer's decay_1d, schedule or clip_grad_norm needs executor protocol version 7; "
        "this run spec is version 6");
}

TEST_CASE("run spec: bad recipes are refused naming the field", "[protocol][recipes]") {
  RunSpec spec = Spec();
  spec.optimizer = WithRecipes();
  json doc = json::parse(RunSpecToJson(spec));
  SECTION("schedule kind") {
    doc["optimizer"]["schedule"]["kind"] = "step";
    CHECK(RunSpecRefusal(doc) ==
          "optimizer.schedule.kind \"step\" is not constant, cosine or linear");
  }
  SECTION("warm-up") {
    doc["optimizer"]["schedule"]["warmup_iterations"] = -1;
    CHECK(RunSpecRefusal(doc) == "optimizer.schedule.warmup_iterations must be >= 0");
  }
  SECTION("min_lr above lr") {
    doc["optimizer"]["schedule"]["min_lr"] = 0.1;
    CHECK(RunSpecRefusal(doc) == "optimizer.schedule.min_lr must be in [0, optimizer.lr]");
  }
  SECTION("clip") {
    doc["optimizer"]["clip_grad_norm"] = -1;
    CHECK(RunSpecRefusal(doc) == "optimizer.clip_grad_norm must be >= 0 (0: no clipping)");
  }
  SECTION("decay_1d type") {
    doc["optimizer"]["decay_1d"] = "no";
    CHECK_THAT(RunSpecRefusal(doc), Catch::Contains("optimizer.decay_1d"));
  }
  SECTION("schedule type") {
    doc["optimizer"]["schedule"] = "cosine";
    CHECK(RunSpecRefusal(doc) == "optimizer.schedule must be an object");
  }
}

}  // namespace
}  // namespace deepool::protocol
