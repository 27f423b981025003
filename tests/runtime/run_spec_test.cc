#include "worker/runtime/run_spec.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "planner/zoo/zoo.h"

namespace deepool::worker {
namespace {

RunSpec MlpSpec() {
  planner::zoo::ModelOptions options;
  options.num_classes = 4;
  auto graph = planner::zoo::BuildModel("mlp", options);
  REQUIRE(graph.ok());
  RunSpec spec;
  spec.job_id = "job-7";
  spec.graph = std::make_shared<const planner::Graph>(std::move(graph).value());
  spec.plan = planner::DataParallelLayout(*spec.graph, 8, 2);
  spec.iterations = 5;
  spec.seed = 42;
  spec.optimizer.name = "adam";
  spec.optimizer.lr = 0.003;
  spec.optimizer.betas = {0.8, 0.99};
  spec.data.seed = 9;
  spec.checkpoint_path = "/tmp/model.pt";
  spec.checkpoints = PeriodicCheckpoints{"/tmp/ck", 10, 3};
  return spec;
}

TEST_CASE("run spec round-trips through JSON", "[run_spec]") {
  RunSpec spec = MlpSpec();
  auto parsed = ParseRunSpecJson(RunSpecToJson(spec));
  INFO(parsed.status().ToString());
  REQUIRE(parsed.ok());
  REQUIRE(parsed->job_id == "job-7");
  REQUIRE(parsed->graph->num_layers() == spec.graph->num_layers());
  REQUIRE(parsed->plan.global_batch == 8);
  REQUIRE(parsed->plan.layers.size() == spec.plan.layers.size());
  REQUIRE(parsed->iterations == 5);
  REQUIRE(parsed->seed == 42);
  REQUIRE(parsed->optimizer == spec.optimizer);
  REQUIRE(parsed->data == spec.data);
  REQUIRE(parsed->checkpoint_path == spec.checkpoint_path);
  REQUIRE(parsed->checkpoints == spec.checkpoints);
}

TEST_CASE("run spec errors name the field", "[run_spec]") {
  nlohmann::json doc = nlohmann::json::parse(RunSpecToJson(MlpSpec()));
  SECTION("iterations") {
    doc["iterations"] = 0;
    REQUIRE_THAT(ParseRunSpecJson(doc.dump()).status().message(), Catch::Contains("iterations"));
  }
  SECTION("checkpoint keep") {
    doc["checkpoint"]["keep"] = 0;
    REQUIRE_THAT(ParseRunSpecJson(doc.dump()).status().message(),
                 Catch::Contains("checkpoint.keep"));
  }
  SECTION("checkpoint fields without a directory") {
    doc["checkpoint"].erase("dir");
    REQUIRE_THAT(ParseRunSpecJson(doc.dump()).status().message(),
                 Catch::Contains("need checkpoint.dir"));
  }
  SECTION("optimizer name") {
    doc["optimizer"]["name"] = "rmsprop";
    REQUIRE_THAT(ParseRunSpecJson(doc.dump()).status().message(),
                 Catch::Contains("optimizer.name"));
  }
  SECTION("optimizer lr") {
    doc["optimizer"]["lr"] = -1;
    REQUIRE_THAT(ParseRunSpecJson(doc.dump()).status().message(), Catch::Contains("optimizer.lr"));
  }
  SECTION("data kind") {
    doc["data"] = {{"kind", "imagenet"}};
    REQUIRE_THAT(ParseRunSpecJson(doc.dump()).status().message(), Catch::Contains("data.kind"));
  }
  SECTION("cifar10 without a path") {
    doc["data"] = {{"kind", "cifar10"}};
    REQUIRE_THAT(ParseRunSpecJson(doc.dump()).status().message(), Catch::Contains("data.path"));
  }
  SECTION("format") {
    doc["format"] = "deepool.plan";
    REQUIRE_THAT(ParseRunSpecJson(doc.dump()).status().message(), Catch::Contains("format"));
  }
  SECTION("a layer the plan does not place") {
    doc["plan"]["layers"].erase(doc["plan"]["layers"].size() - 1);
    REQUIRE_THAT(ParseRunSpecJson(doc.dump()).status().message(),
                 Catch::Contains("no placement for layer fc3"));
  }
  REQUIRE(ParseRunSpecJson(doc.dump()).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("a run spec whose batch norm would see one value per channel is refused", "[run_spec]") {
  planner::Layer conv;
  conv.name = "conv";
  conv.op = planner::Op::kConv2d;
  conv.inputs = {"input"};
  conv.attrs.out_channels = 4;
  planner::Layer bn;
  bn.name = "bn";
  bn.op = planner::Op::kBatchNorm2d;
  bn.inputs = {"conv"};
  auto graph = planner::Graph::Create("one_by_one", {3, 1, 1}, {conv, bn});
  REQUIRE(graph.ok());
  RunSpec spec = MlpSpec();
  spec.graph = std::make_shared<const planner::Graph>(std::move(graph).value());
  spec.plan = planner::DataParallelLayout(*spec.graph, 1, 1);
  const Status refused = ValidateRunSpec(spec);
  CHECK(refused.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(refused.message(), Catch::Contains("plan") && Catch::Contains("'bn'"));
  CHECK_THAT(ParseRunSpecJson(RunSpecToJson(spec)).status().message(), Catch::Contains("'bn'"));
  spec.plan = planner::DataParallelLayout(*spec.graph, 2, 2);  // one sample per rank: synchronised
  CHECK(ValidateRunSpec(spec).ok());
}

}  // namespace
}  // namespace deepool::worker
