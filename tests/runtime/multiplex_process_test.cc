// The run spec's "background" field and the executor process with a BG job attached: progress
// lines carry the device-sharing fields.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "planner/zoo/zoo.h"
#include "tests/runtime/executor_test_util.h"
#include "worker/runtime/executor_events.h"
#include "worker/runtime/executor_process.h"
#include "worker/runtime/run_spec.h"

namespace deepool::worker {
namespace {

namespace fs = std::filesystem;

std::shared_ptr<const planner::Graph> Model(const std::string& name) {
  auto graph = planner::zoo::BuildModel(name, planner::zoo::ModelOptions{10});
  REQUIRE(graph.ok());
  return std::make_shared<const planner::Graph>(std::move(graph).value());
}

RunSpec SpecWithBackground() {
  RunSpec spec;
  spec.job_id = "fg";
  spec.graph = Model("mlp");
  spec.plan = testing::MakePlan(*spec.graph, 8, 1, {0});
  spec.iterations = 3;
  spec.seed = 1;
  BackgroundSpec bg;
  bg.job_id = "bg";
  bg.graph = Model("mlp");
  bg.batch_size = 4;
  bg.seed = 2;
  bg.iterations = 2;
  spec.background = bg;
  return spec;
}

TEST_CASE("run spec: the background field round-trips and its errors name the field",
          "[multiplex]") {
  RunSpec spec = SpecWithBackground();
  auto parsed = ParseRunSpecJson(RunSpecToJson(spec));
  INFO(parsed.status().ToString());
  REQUIRE(parsed.ok());
  REQUIRE(parsed->background.has_value());
  REQUIRE(parsed->background->job_id == "bg");
  REQUIRE(parsed->background->batch_size == 4);
  REQUIRE(parsed->background->iterations == 2);
  REQUIRE(RunSpecToJson(*parsed) == RunSpecToJson(spec));

  spec.background.reset();
  auto without = ParseRunSpecJson(RunSpecToJson(spec));
  REQUIRE(without.ok());
  REQUIRE_FALSE(without->background.has_value());

  auto doc = nlohmann::json::parse(RunSpecToJson(SpecWithBackground()));
  doc["background"]["batch_size"] = 0;
  auto bad = ParseRunSpecJson(doc.dump());
  REQUIRE_FALSE(bad.ok());
  REQUIRE_THAT(bad.status().message(), Catch::Contains("background.batch_size"));
}

TEST_CASE("executor process with a BG job: iteration lines carry the sharing fields",
          "[multiplex]") {
  fs::path dir = fs::temp_directory_path() /
                 ("deepool-mux-" + std::to_string(::getpid()) + "-" + std::to_string(std::rand()));
  fs::create_directories(dir);
  std::string path = (dir / "run.json").string();
  REQUIRE(WriteRunSpecFile(SpecWithBackground(), path).ok());
  ExecutorProcessOptions options;
  options.run_spec_path = path;
  options.rank = 0;
  options.world_size = 1;
  options.store = "127.0.0.1:0";
  options.timeout_s = 30;
  std::ostringstream out;
  Status status = RunExecutorProcess(options, out);
  INFO(out.str());
  REQUIRE(status.ok());
  std::istringstream lines(out.str());
  std::string line;
  int iterations = 0;
  bool done = false;
  while (std::getline(lines, line)) {
    auto event = ParseExecutorEvent(line);
    REQUIRE(event.ok());
    if ((*event)["event"] == "iteration") {
      ++iterations;
      for (const char* field :
           {"fg_busy_ms", "bg_busy_ms", "idle_ms", "bg_samples_per_s", "bg_iterations"}) {
        INFO(field);
        REQUIRE((*event)[field].is_number());
      }
      REQUIRE((*event)["busy_ms"].is_number());
    }
    if ((*event)["event"] == "done") done = true;
  }
  REQUIRE(iterations == 3);
  REQUIRE(done);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace deepool::worker
