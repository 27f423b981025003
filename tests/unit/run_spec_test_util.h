// Run specs for the protocol tests: a zoo model with 4 classes, a minimal run spec (job "job-1",
// data parallel on 2 of 8 ranks, 5 iterations) that each test adds its fields to, a BG job to host,
// and the message a run spec's JSON is refused with.
#pragma once

#include <catch2/catch.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "planner/plan.h"
#include "planner/zoo/zoo.h"
#include "protocol/run_spec.h"

namespace deepool::protocol {

inline planner::Graph ZooModel(const std::string& name) {
  planner::zoo::ModelOptions options;
  options.num_classes = 4;
  auto graph = planner::zoo::BuildModel(name, options);
  REQUIRE(graph.ok());
  return std::move(graph).value();
}

inline RunSpec MinimalRunSpec(const std::string& model) {
  RunSpec spec;
  spec.job_id = "job-1";
  spec.graph = std::make_shared<const planner::Graph>(ZooModel(model));
  spec.plan = planner::DataParallelLayout(*spec.graph, 8, 2);
  spec.iterations = 5;
  return spec;
}

// A BG job to host: mlp at batch 4 for 7 iterations on CIFAR-10, idle-only sharing, rank 1.
inline BackgroundSpec SampleBackgroundSpec() {
  BackgroundSpec bg;
  bg.job_id = "bg-1";
  bg.graph = std::make_shared<const planner::Graph>(ZooModel("mlp"));
  bg.batch_size = 4;
  bg.iterations = 7;
  bg.seed = 3;
  bg.data.kind = "cifar10";
  bg.data.path = "/data/cifar";
  bg.sharing.mode = SharingMode::kIdleOnly;
  bg.sharing.cuda_graphs = false;
  bg.ranks = {1};
  return bg;
}

// The INVALID_ARGUMENT message ParseRunSpecJson refuses `doc` with (the test fails if it parses).
inline std::string RunSpecRefusal(const nlohmann::json& doc) {
  StatusOr<RunSpec> parsed = ParseRunSpecJson(doc.dump());
  REQUIRE_FALSE(parsed.ok());
  CHECK(parsed.status().code() == StatusCode::kInvalidArgument);
  return parsed.status().message();
}

}  // namespace deepool::protocol
